# Rendered by bprun from templates/ci/redis.gitlab-ci.yml.tpl for {name}: no build stage, the
# chart runs the upstream redis:{redis_tag} image.
include:
  - project: blueprint-apps/shared-code
    ref: main
    file: templates/ci-common.yml

stages:
  - lint
  - deploy

variables:
  APP_NAME: "{name}"
  HELM_RELEASE: "{release}"
  HELM_NAMESPACE: "{namespace}"
  REDIS_HOST: "{redis_host}"
  REDIS_TAG: "{redis_tag}"

lint:
  stage: lint
  extends: .helm-lint

deploy:
  stage: deploy
  needs: [lint]
  extends: .helm-deploy
