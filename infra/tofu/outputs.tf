output "kubeconfig_path" {
  description = "The kubeconfig phase 2 and 3 use: export KUBECONFIG=<this>."
  value       = kind_cluster.blueprint.kubeconfig_path
}

output "endpoint" {
  description = "The cluster's API server."
  value       = kind_cluster.blueprint.endpoint
}
