"""The project's test cluster: a real single-node Kubernetes on 127.0.0.1 (docs/kubernetes-cluster.md).

scripts/k8s-cluster.sh is the entry point: it installs the host's packages and builds the binaries
(scripts/k8s-build.sh), then runs ``python -m scripts.testcluster up|down|status|env`` (main.py).

- settings.py  the settings, in one place (the tests import them): ports, subnets, names, images, paths
- configs.py   containerd's, gVisor's shim's, CNI's and the kubelet's configurations, and the kubeconfigs
- pki.py       the CA and the certificates (openssl)
- supervise.py pid files, start, stop, waits
- daemons.py   the six daemons' command lines and readiness checks
- health.py    etcd, the API server, the node: are they up
- images.py    the images pods use, copied from the Docker engine; the seccomp profiles
- network.py   the egress attachment, the network's clean-up
- host.py      sysctls, cgroups, mounts, leftover processes
- objects.py   RBAC, RuntimeClass, the gVisor probe, through the official client
- gvisor.py    whether gVisor runs pods here (RuntimeClass gvisor or the reason why not)
- cluster.py   the steps of up, down, status and env
"""
