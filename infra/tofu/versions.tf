# The kind cluster of phase 1 as OpenTofu. bprun runs `tofu init` and `tofu validate` here
# (scripts/phase1.rhai); `tofu -chdir=infra/tofu apply` is the operator's.
terraform {
  required_version = ">= 1.6.0"
  required_providers {
    kind = {
      source  = "tehcyx/kind"
      version = "~> 0.9"
    }
    null = {
      source  = "hashicorp/null"
      version = "~> 3.2"
    }
  }
}
