//! GitLab's list answers: `order_by`/`sort`, offset pagination with its headers and links, keyset
//! pagination.

use super::GitlabSim;
use crate::http::{SimRequest, SimResponse};
use serde_json::{Value, json};

/// `order_by` and `sort` of a list request, as GitLab's API takes them: an unknown value is a
/// 400 in Grape's words; without them the list keeps the endpoint's own order.
pub(super) fn order(request: &SimRequest, items: &mut [Value]) -> Result<(), SimResponse> {
    const ORDER_BY: &[&str] = &[
        "id",
        "iid",
        "name",
        "path",
        "key",
        "status",
        "ref",
        "created_at",
        "updated_at",
        "last_activity_at",
    ];
    let order_by = request.query.get("order_by").map(String::as_str);
    let sort = request.query.get("sort").map(String::as_str);
    if order_by.is_none() && sort.is_none() {
        return Ok(());
    }
    if let Some(field) = order_by
        && !ORDER_BY.contains(&field)
    {
        return Err(SimResponse::json(
            400,
            &json!({"error": "order_by does not have a valid value"}),
        ));
    }
    let descending = match sort {
        None => order_by != Some("name") && order_by != Some("path"),
        Some("asc") => false,
        Some("desc") => true,
        Some(_) => {
            return Err(SimResponse::json(
                400,
                &json!({"error": "sort does not have a valid value"}),
            ));
        }
    };
    let field = order_by.unwrap_or("id");
    items.sort_by(|a, b| {
        let ordering = match (&a[field], &b[field]) {
            (Value::Number(x), Value::Number(y)) => x
                .as_f64()
                .partial_cmp(&y.as_f64())
                .unwrap_or(std::cmp::Ordering::Equal),
            (x, y) => x.as_str().unwrap_or("").cmp(y.as_str().unwrap_or("")),
        };
        // Ties in id order, as a database's stable secondary key.
        let ordering = ordering.then_with(|| {
            a["id"]
                .as_i64()
                .unwrap_or(0)
                .cmp(&b["id"].as_i64().unwrap_or(0))
        });
        if descending {
            ordering.reverse()
        } else {
            ordering
        }
    });
    Ok(())
}

/// What a query value escapes in the links GitLab answers with.
pub(super) const QUERY: &percent_encoding::AsciiSet = &percent_encoding::NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// `per_page`: 20 by default, 1 to 100.
fn per_page(request: &SimRequest) -> usize {
    request
        .query
        .get("per_page")
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(20)
        .clamp(1, 100)
}

impl GitlabSim {
    pub(super) fn paginate(&self, request: &SimRequest, mut items: Vec<Value>) -> SimResponse {
        if request.query.get("pagination").map(String::as_str) == Some("keyset") {
            return self.paginate_keyset(request, items);
        }
        if let Err(response) = order(request, &mut items) {
            return response;
        }
        let per_page = per_page(request);
        let page = request
            .query
            .get("page")
            .and_then(|v| v.parse::<usize>().ok())
            .unwrap_or(1)
            .max(1);
        let total = items.len();
        let pages = total.div_ceil(per_page).max(1);
        let slice: Vec<Value> = items
            .into_iter()
            .skip((page - 1) * per_page)
            .take(per_page)
            .collect();
        let base = format!("{}{}", self.base_url(), request.path);
        // GitLab's links keep the request's other query parameters.
        let kept: String = request
            .query_pairs
            .iter()
            .filter(|(key, _)| key != "page" && key != "per_page")
            .map(|(key, value)| {
                format!(
                    "&{}={}",
                    percent_encoding::utf8_percent_encode(key, QUERY),
                    percent_encoding::utf8_percent_encode(value, QUERY)
                )
            })
            .collect();
        let link = |number: usize, rel: &str| {
            format!("<{base}?page={number}&per_page={per_page}{kept}>; rel=\"{rel}\"")
        };
        let mut links = Vec::new();
        if page > 1 {
            links.push(link(page - 1, "prev"));
        }
        if page < pages {
            links.push(link(page + 1, "next"));
        }
        links.push(link(1, "first"));
        links.push(link(pages, "last"));
        SimResponse::json(200, &Value::Array(slice))
            .with_header("link", links.join(", "))
            .with_header("x-page", page.to_string())
            .with_header("x-per-page", per_page.to_string())
            .with_header("x-total", total.to_string())
            .with_header("x-total-pages", pages.to_string())
            .with_header(
                "x-next-page",
                if page < pages {
                    (page + 1).to_string()
                } else {
                    String::new()
                },
            )
            .with_header(
                "x-prev-page",
                if page > 1 {
                    (page - 1).to_string()
                } else {
                    String::new()
                },
            )
    }

    /// Keyset pagination (`pagination=keyset&order_by=id&sort=asc|desc&id_after=N`): only a
    /// `link` header with rel="next", and no totals, as GitLab answers.
    pub(super) fn paginate_keyset(
        &self,
        request: &SimRequest,
        mut items: Vec<Value>,
    ) -> SimResponse {
        let per_page = per_page(request);
        let descending = request.query.get("sort").map(String::as_str) == Some("desc");
        items.sort_by_key(|item| item["id"].as_u64().unwrap_or(0));
        if descending {
            items.reverse();
        }
        let after = request
            .query
            .get("id_after")
            .and_then(|v| v.parse::<u64>().ok());
        let before = request
            .query
            .get("id_before")
            .and_then(|v| v.parse::<u64>().ok());
        let remaining: Vec<Value> = items
            .into_iter()
            .filter(|item| {
                let id = item["id"].as_u64().unwrap_or(0);
                after.is_none_or(|after| id > after) && before.is_none_or(|before| id < before)
            })
            .collect();
        let page: Vec<Value> = remaining.iter().take(per_page).cloned().collect();
        let mut response = SimResponse::json(200, &Value::Array(page.clone()));
        if remaining.len() > per_page
            && let Some(last) = page.last().and_then(|item| item["id"].as_u64())
        {
            let cursor = if descending {
                format!("id_before={last}")
            } else {
                format!("id_after={last}")
            };
            let sort = if descending { "desc" } else { "asc" };
            response = response.with_header(
                "link",
                format!("<{}{}?pagination=keyset&per_page={per_page}&order_by=id&sort={sort}&{cursor}>; rel=\"next\"", self.base_url(), request.path),
            );
        }
        response
    }
}
