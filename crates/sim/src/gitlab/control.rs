//! The simulator's own endpoints under `/-/`: GitLab's health checks, and `/-/sim/*`, where
//! tests read the request log, inject faults, move the calendar and do what the toolbox's
//! `gitlab-rails runner` does (mint a token, create a runner).

use serde_json::{Value, json};

use super::runners::RegistrationType;
use super::tokens::format_date;
use super::{GitlabSim, message, param_error, string_field};
use crate::http::{Faults, SimRequest, SimResponse};

impl GitlabSim {
    pub(super) fn request_log(&self, _: &SimRequest) -> SimResponse {
        SimResponse::json(200, &self.accounting.snapshot())
    }

    pub(super) fn clear_request_log(&self, _: &SimRequest) -> SimResponse {
        self.accounting.clear();
        SimResponse::json(200, &json!({"cleared": true}))
    }

    pub(super) fn injected_faults(&self, _: &SimRequest) -> SimResponse {
        SimResponse::json(200, &json!(self.faults.get()))
    }

    pub(super) fn inject_faults(&self, request: &SimRequest) -> SimResponse {
        match serde_json::from_slice::<Faults>(&request.body) {
            Ok(faults) => {
                self.faults.set(faults.clone());
                SimResponse::json(200, &json!(faults))
            }
            Err(error) => param_error(&format!("invalid faults: {error}")),
        }
    }

    /// Minting a PAT needs a valid token already (as `gitlab-rails` needs the host).
    pub(super) fn toolbox_token(&self, request: &SimRequest) -> SimResponse {
        if self.authenticate(request).is_none() {
            return message(401, "401 Unauthorized");
        }
        let body = request.params();
        let name = string_field(&body, "name")
            .unwrap_or_else(|| "minted by gitlab-rails runner".to_string());
        let expires_in_days = body.get("expires_in_days").and_then(Value::as_i64);
        SimResponse::json(
            201,
            &json!({"token": self.mint_token(&name, expires_in_days), "username": "root"}),
        )
    }

    /// The simulator's calendar: tests move it forward to let tokens expire.
    pub(super) fn calendar(&self, _: &SimRequest) -> SimResponse {
        SimResponse::json(200, &json!({"today": format_date(self.today())}))
    }

    pub(super) fn advance_calendar(&self, request: &SimRequest) -> SimResponse {
        let Some(days) = request.params().get("advance_days").and_then(Value::as_i64) else {
            return param_error("advance_days is missing");
        };
        self.clock_days
            .fetch_add(days, std::sync::atomic::Ordering::Relaxed);
        SimResponse::json(200, &json!({"today": format_date(self.today())}))
    }

    /// `Ci::Runner.create!` through the toolbox, for `bprun sim kube --gitlab-url`.
    pub(super) fn toolbox_runner(&self, request: &SimRequest) -> SimResponse {
        if self.authenticate(request).is_none() {
            return message(401, "401 Unauthorized");
        }
        let params = request.params();
        let description = string_field(&params, "description")
            .unwrap_or_else(|| "created by gitlab-rails runner".to_string());
        // `Ci::Runner`'s enum default when the code names none.
        let registration_type = string_field(&params, "registration_type")
            .as_deref()
            .map_or(
                Some(RegistrationType::RegistrationToken),
                RegistrationType::named,
            );
        let Some(registration_type) = registration_type else {
            return message(
                400,
                "registration_type is not authenticated_user or registration_token",
            );
        };
        SimResponse::json(
            201,
            &json!({"token": self.create_instance_runner(&description, registration_type)}),
        )
    }
}
