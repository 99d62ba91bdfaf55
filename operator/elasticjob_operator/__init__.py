"""ElasticJob operator: provisions etcd and workers, counts restarts job-wide, detects stalls."""

__version__ = "0.1.0"
