//! Helm through the real `helm` binary. Being written.
