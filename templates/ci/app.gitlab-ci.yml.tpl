# Rendered by bprun from templates/ci/app.gitlab-ci.yml.tpl for {name}.
# Placeholders are in braces; GitLab variables use the $VAR form (braces would be placeholders).
include:
  - project: blueprint-apps/shared-code
    ref: main
    file: templates/ci-common.yml

stages:
  - lint
  - build
  - deploy

variables:
  APP_NAME: "{name}"
  HELM_RELEASE: "{release}"
  HELM_NAMESPACE: "{namespace}"
  RUN_UNIT_TESTS: "{tests}"

lint:
  stage: lint
  extends: .helm-lint

build:
  stage: build
  extends: .kaniko-build
  variables:
    DOCKERFILE_PATH: "{dockerfile_path}"

deploy:
  stage: deploy
  needs: [lint, build]
  extends: .helm-deploy
