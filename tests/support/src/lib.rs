//! A real kube-apiserver + etcd for tests, started once per test binary.
