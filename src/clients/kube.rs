//! Kubernetes through kube-rs. Being written.
