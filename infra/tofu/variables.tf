variable "cluster_name" {
  description = "The kind cluster's name (its nodes are <name>-control-plane, <name>-worker, ...)."
  type        = string
  default     = "blueprint"
}

variable "node_image" {
  description = "The kindest/node image of every node; null keeps the kind provider's default."
  type        = string
  default     = null
}

variable "shared_data_dir" {
  description = "The host folder mounted on every node at /var/local/shared (local-path volumes, stable data), relative to this folder."
  type        = string
  default     = "../data/shared"
}

variable "kubeconfig_path" {
  description = "Where the cluster's kubeconfig is written, relative to this folder."
  type        = string
  default     = "kubeconfig"
}

variable "preserve_stateful_data" {
  description = "Keep the stable data under shared_data_dir when the cluster is destroyed. Must agree with `bprun scripts/phase2.rhai --destroy [--preserve-data]` (the workflows seed's rule #4): phase 1 and phase 2 refuse a disagreement."
  type        = bool
  default     = false
}
