locals {
  shared_host_path = abspath("${path.module}/${var.shared_data_dir}")
  # Where every node sees the shared folder (phase 2's local-path config and stable volumes).
  shared_node_path = "/var/local/shared"
  # Three nodes for GitLab, one for the runner: labelled so workloads can be pinned.
  workers = concat(
    [for index in range(3) : "gitlab"],
    ["runner"],
  )
}

resource "kind_cluster" "blueprint" {
  name            = var.cluster_name
  node_image      = var.node_image
  kubeconfig_path = abspath("${path.module}/${var.kubeconfig_path}")
  wait_for_ready  = true

  kind_config {
    kind        = "Cluster"
    api_version = "kind.x-k8s.io/v1alpha4"

    node {
      role = "control-plane"
      extra_mounts {
        host_path      = local.shared_host_path
        container_path = local.shared_node_path
      }
    }

    dynamic "node" {
      for_each = local.workers
      content {
        role   = "worker"
        labels = { "blueprint.dev/pool" = node.value }
        extra_mounts {
          host_path      = local.shared_host_path
          container_path = local.shared_node_path
        }
      }
    }
  }
}

# On destroy: the stable data goes unless preserve_stateful_data (a destroy-time provisioner
# sees only its own triggers, so the decision travels in them).
resource "null_resource" "wipe_data" {
  triggers = {
    stable_dir = "${local.shared_host_path}/stable"
    preserve   = tostring(var.preserve_stateful_data)
  }

  provisioner "local-exec" {
    when    = destroy
    command = self.triggers.preserve == "true" ? "echo 'preserve_stateful_data: kept ${self.triggers.stable_dir}'" : "rm -rf '${self.triggers.stable_dir}'"
  }

  depends_on = [kind_cluster.blueprint]
}
