"""Configuration files of a real node and the cluster DNS manifests (pure rendering).

Each function returns text or a manifest; none reads or writes files. JSON is valid YAML, so the
kubelet and kube-proxy read the configurations rendered here as JSON.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..placement import REAL_NODE_LABEL
from ..versions import COREDNS_IMAGE, PAUSE_IMAGE
from .layout import CLUSTER_DNS_IP, CLUSTER_DOMAIN, NodeLayout

#: What the kubelet wants these sysctls to be; with ``protectKernelDefaults`` it refuses to start
#: otherwise, without it rewrites them on the host. The node's mount namespace shows it these
#: values instead (files bound over ``/proc/sys``), so the host's settings stay untouched.
KUBELET_SYSCTLS = {
    "vm/overcommit_memory": "1",
    "vm/panic_on_oom": "0",
    "kernel/panic": "10",
    "kernel/panic_on_oops": "1",
    "kernel/keys/root_maxkeys": "1000000",
    "kernel/keys/root_maxbytes": "25000000",
}


def _toml_str(value: str | Path) -> str:
    return json.dumps(str(value))


def containerd_config(
    *, root: Path, state: Path, socket: Path, runc_root: Path, cni_conf_dir: Path
) -> str:
    """containerd 1.6 configuration (version 2) with the CRI plugin set up for this machine.

    ``restrict_oom_score_adj``: the shell here cannot lower ``oom_score_adj`` and runc fails every
    sandbox without it. ``enable_unprivileged_ports``: non-root containers may bind ports < 1024
    (CoreDNS on 53) as in a default Docker or CRI-O set-up.
    """
    cri = 'plugins."io.containerd.grpc.v1.cri"'
    return "\n".join(
        [
            "version = 2",
            f"root = {_toml_str(root)}",
            f"state = {_toml_str(state)}",
            "disabled_plugins = ["
            '"io.containerd.snapshotter.v1.btrfs", "io.containerd.snapshotter.v1.zfs", '
            '"io.containerd.snapshotter.v1.devmapper", "io.containerd.snapshotter.v1.aufs", '
            '"io.containerd.tracing.processor.v1.otlp", "io.containerd.internal.v1.tracing"]',
            "",
            "[grpc]",
            f"  address = {_toml_str(socket)}",
            "[ttrpc]",
            f"  address = {_toml_str(str(socket) + '.ttrpc')}",
            "[debug]",
            '  address = ""',
            "[metrics]",
            '  address = ""',
            '[plugins."io.containerd.internal.v1.opt"]',
            f"  path = {_toml_str(root / 'opt')}",
            f"[{cri}]",
            f"  sandbox_image = {_toml_str(PAUSE_IMAGE)}",
            "  restrict_oom_score_adj = true",
            "  disable_hugetlb_controller = true",
            "  tolerate_missing_hugetlb_controller = true",
            "  netns_mounts_under_state_dir = true",
            "  enable_unprivileged_ports = true",
            "  enable_unprivileged_icmp = true",
            "  disable_apparmor = true",
            '  stream_server_address = "127.0.0.1"',
            '  stream_server_port = "0"',
            f"[{cri}.containerd]",
            '  snapshotter = "overlayfs"',
            '  default_runtime_name = "runc"',
            f"[{cri}.containerd.runtimes.runc]",
            '  runtime_type = "io.containerd.runc.v2"',
            f"[{cri}.containerd.runtimes.runc.options]",
            "  SystemdCgroup = false",
            f"  Root = {_toml_str(runc_root)}",
            f"[{cri}.cni]",
            '  bin_dir = "/usr/lib/cni"',
            f"  conf_dir = {_toml_str(cni_conf_dir)}",
            "  max_conf_num = 1",
            "",
        ]
    )


def cni_conflist(layout: NodeLayout) -> str:
    """bridge + host-local on the node's pod subnet, portmap, loopback.

    No masquerading: pod addresses are routed between nodes (and to the API server's host), so a
    pod sees its peers' real addresses. ``hairpinMode`` lets a pod reach itself via a Service.
    """
    conf = {
        "cniVersion": "1.0.0",
        "name": "elasticjob",
        "plugins": [
            {
                "type": "bridge",
                "bridge": "cni0",
                "isGateway": True,
                "ipMasq": False,
                "hairpinMode": True,
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": layout.pod_cidr, "gateway": layout.pod_gateway}]],
                    "routes": [{"dst": "0.0.0.0/0"}],
                },
            },
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }
    return json.dumps(conf, indent=2) + "\n"


def kubelet_config(
    layout: NodeLayout,
    *,
    ca_file: Path,
    tls_cert: Path,
    tls_key: Path,
    pod_logs_dir: Path,
    max_pods: int,
) -> str:
    """KubeletConfiguration for one node (cgroup v1 with the cgroupfs driver). Real nodes
    register untainted: they are the cluster's ordinary nodes (virtual ones carry the taint)."""
    config: dict[str, Any] = {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "address": layout.node_ip,
        "port": 10250,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": 10248,
        "readOnlyPort": 0,
        "tlsCertFile": str(tls_cert),
        "tlsPrivateKeyFile": str(tls_key),
        "rotateCertificates": False,
        "serverTLSBootstrap": False,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": True},
            "x509": {"clientCAFile": str(ca_file)},
        },
        "authorization": {"mode": "Webhook"},
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "cgroupDriver": "cgroupfs",
        "cgroupRoot": layout.cgroup,
        "cgroupsPerQOS": True,
        "failCgroupV1": False,
        "failSwapOn": False,
        "protectKernelDefaults": True,
        "clusterDNS": [CLUSTER_DNS_IP],
        "clusterDomain": CLUSTER_DOMAIN,
        "resolvConf": str(layout.resolv_conf),
        "podLogsDir": str(pod_logs_dir),
        "volumePluginDir": str(layout.dir / "volume-plugins"),
        "staticPodPath": "",
        "maxPods": max_pods,
        "podCIDR": layout.pod_cidr,
        "serializeImagePulls": False,
        # The machine's disk and memory are shared with everything else (and every node reports
        # all of them): evict only when they are really exhausted, and recover at once.
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "256Mi",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "256Mi",
        },
        "evictionPressureTransitionPeriod": "10s",
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "nodeStatusUpdateFrequency": "5s",
        "nodeStatusReportFrequency": "10s",
        "syncFrequency": "10s",
        "fileCheckFrequency": "20s",
        "shutdownGracePeriod": "0s",
        "registerNode": True,
    }
    return json.dumps(config, indent=2) + "\n"


def kube_proxy_config(layout: NodeLayout, kubeconfig: Path, cluster_cidr: str) -> str:
    """KubeProxyConfiguration: iptables mode, no host-wide conntrack or sysctl changes."""
    config = {
        "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
        "kind": "KubeProxyConfiguration",
        "mode": "iptables",
        "clientConnection": {"kubeconfig": str(kubeconfig)},
        "hostnameOverride": layout.name,
        "bindAddress": layout.node_ip,
        "clusterCIDR": cluster_cidr,
        "healthzBindAddress": "127.0.0.1:10256",
        "metricsBindAddress": "127.0.0.1:10249",
        # 0: leave the (machine-wide) conntrack table size and timeouts alone.
        "conntrack": {
            "maxPerCore": 0,
            "min": 0,
            "tcpEstablishedTimeout": "0s",
            "tcpCloseWaitTimeout": "0s",
        },
        "iptables": {"localhostNodePorts": False, "syncPeriod": "10s", "minSyncPeriod": "0s"},
    }
    return json.dumps(config, indent=2) + "\n"


def network_policy_rbac(user: str) -> list[dict[str, Any]]:
    """What the enforcer reads (the read rules of kube-router's own ClusterRole), bound to the
    static ``user`` it runs as."""
    name = "elasticjob:kube-router"
    rbac = "rbac.authorization.k8s.io"
    read = ["get", "list", "watch"]
    core = ["namespaces", "pods", "services", "nodes", "endpoints"]
    return [
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "ClusterRole",
            "metadata": {"name": name},
            "rules": [
                {"apiGroups": [""], "resources": core, "verbs": read},
                {
                    "apiGroups": ["networking.k8s.io"],
                    "resources": ["networkpolicies"],
                    "verbs": read,
                },
                {"apiGroups": ["discovery.k8s.io"], "resources": ["endpointslices"], "verbs": read},
            ],
        },
        {
            "apiVersion": f"{rbac}/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": name},
            "roleRef": {"apiGroup": rbac, "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": rbac, "kind": "User", "name": user}],
        },
    ]


COREFILE = f"""\
.:53 {{
    errors
    health :8080
    ready :8181
    kubernetes {CLUSTER_DOMAIN} in-addr.arpa ip6.arpa {{
        pods insecure
        fallthrough in-addr.arpa ip6.arpa
        ttl 5
    }}
    cache 5
    loop
    loadbalance
}}
"""


def coredns_manifests(replicas: int = 2) -> list[dict[str, Any]]:
    """CoreDNS as clusters run it: ServiceAccount, RBAC, ConfigMap, Deployment, and the
    ``kube-dns`` Service at :data:`CLUSTER_DNS_IP` in ``kube-system``.

    ``replicas`` pods (kubeadm's two, at most one per node), so that losing the node of one
    does not take every name in the cluster with it (a job's agents find their etcd by name).
    There is no upstream resolver (no ``forward``): names outside the cluster fail at once.
    """
    labels = {"k8s-app": "kube-dns"}
    meta = {"namespace": "kube-system"}
    tolerations: list[dict[str, Any]] = [
        {"key": "CriticalAddonsOnly", "operator": "Exists"},
    ]
    return [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "coredns", **meta},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "metadata": {"name": "system:coredns"},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["endpoints", "services", "pods", "namespaces"],
                    "verbs": ["list", "watch"],
                },
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": "system:coredns"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "system:coredns",
            },
            "subjects": [{"kind": "ServiceAccount", "name": "coredns", "namespace": "kube-system"}],
        },
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "coredns", **meta},
            "data": {"Corefile": COREFILE},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "coredns", "labels": labels, **meta},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "serviceAccountName": "coredns",
                        "affinity": {
                            "podAntiAffinity": {
                                "requiredDuringSchedulingIgnoredDuringExecution": [
                                    {
                                        "labelSelector": {"matchLabels": labels},
                                        "topologyKey": "kubernetes.io/hostname",
                                    }
                                ]
                            }
                        },
                        "priorityClassName": "system-cluster-critical",
                        "dnsPolicy": "Default",
                        "tolerations": tolerations,
                        # On real nodes only: the emulator runs no images.
                        "nodeSelector": {REAL_NODE_LABEL: "true"},
                        "containers": [
                            {
                                "name": "coredns",
                                "image": COREDNS_IMAGE,
                                "imagePullPolicy": "Never",
                                "args": ["-conf", "/etc/coredns/Corefile"],
                                "ports": [
                                    {"name": "dns", "containerPort": 53, "protocol": "UDP"},
                                    {"name": "dns-tcp", "containerPort": 53, "protocol": "TCP"},
                                ],
                                "resources": {
                                    "requests": {"cpu": "50m", "memory": "40Mi"},
                                    "limits": {"memory": "170Mi"},
                                },
                                "volumeMounts": [
                                    {
                                        "name": "config",
                                        "mountPath": "/etc/coredns",
                                        "readOnly": True,
                                    }
                                ],
                                "readinessProbe": {
                                    "httpGet": {"path": "/ready", "port": 8181},
                                    "periodSeconds": 2,
                                },
                                "livenessProbe": {
                                    "httpGet": {"path": "/health", "port": 8080},
                                    "initialDelaySeconds": 30,
                                },
                                "securityContext": {
                                    "allowPrivilegeEscalation": False,
                                    "readOnlyRootFilesystem": True,
                                    "capabilities": {"add": ["NET_BIND_SERVICE"], "drop": ["ALL"]},
                                },
                            }
                        ],
                        "volumes": [{"name": "config", "configMap": {"name": "coredns"}}],
                    },
                },
            },
        },
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "kube-dns", "labels": labels, **meta},
            "spec": {
                "selector": labels,
                "clusterIP": CLUSTER_DNS_IP,
                "ports": [
                    {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
                    {"name": "dns-tcp", "port": 53, "protocol": "TCP", "targetPort": 53},
                ],
            },
        },
    ]
