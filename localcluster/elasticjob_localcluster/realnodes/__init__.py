"""Real nodes of the local cluster: kubelet, containerd and runc, CNI bridge networking,
kube-proxy and a fake GPU device plugin per node, each node in namespaces of its own."""
