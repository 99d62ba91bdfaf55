"""The operator's pure core: the spec, names, conditions, restarts, status, planning, manifests
and the other decisions of a reconcile step. Nothing here does I/O or imports kopf, a Kubernetes
or etcd client, HTTP or metrics (the ``pure-core`` contract in ``.importlinter``); the modules
beside this package are the edges that do."""
