"""ElasticJob agent: a drop-in for ``torchrun`` with dynamic rendezvous on etcd v3."""

__version__ = "0.1.0"
