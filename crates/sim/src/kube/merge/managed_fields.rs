//! `metadata.managedFields` entries and the bookkeeping of ordinary (non-apply) updates.

use serde_json::{Map, Value};

use super::fields_v1::{
    FieldSet, PathStep, Scope, decode_fields, encode_fields, object_fields, value_at,
};
use super::{object_member, opt_json_eq};

/// One `metadata.managedFields` entry: its JSON (other members kept as they were) and its set.
pub(super) struct Entry {
    pub(super) raw: Map<String, Value>,
    pub(super) fields: FieldSet,
}

impl Entry {
    pub(super) fn new(
        manager: &str,
        operation: &str,
        api_version: &str,
        time: &str,
        subresource: Option<&str>,
        fields: FieldSet,
    ) -> Entry {
        let mut raw = Map::new();
        raw.insert("manager".into(), manager.into());
        raw.insert("operation".into(), operation.into());
        raw.insert("apiVersion".into(), api_version.into());
        raw.insert("time".into(), time.into());
        if let Some(sub) = subresource {
            raw.insert("subresource".into(), sub.into());
        }
        Entry { raw, fields }
    }

    pub(super) fn get(&self, key: &str) -> &str {
        self.raw.get(key).and_then(Value::as_str).unwrap_or("")
    }

    /// Manager identity as kube-apiserver keys it: appliers regardless of apiVersion, updaters per apiVersion.
    pub(super) fn is(
        &self,
        manager: &str,
        operation: &str,
        api_version: &str,
        subresource: Option<&str>,
    ) -> bool {
        self.get("manager") == manager
            && self.get("operation") == operation
            && self.raw.get("subresource").and_then(Value::as_str) == subresource
            && (operation == "Apply" || self.get("apiVersion") == api_version)
    }

    pub(super) fn to_json(&self) -> Value {
        let mut m = self.raw.clone();
        m.insert("fieldsType".into(), "FieldsV1".into());
        m.insert("fieldsV1".into(), encode_fields(&self.fields));
        Value::Object(m)
    }
}

pub(super) fn managed_fields_of(obj: &Value) -> Option<&Value> {
    obj.get("metadata")?.get("managedFields")
}

pub(super) fn read_entries(managed_fields: Option<&Value>) -> Vec<Entry> {
    let Some(items) = managed_fields.and_then(Value::as_array) else {
        return Vec::new();
    };
    items
        .iter()
        .filter_map(Value::as_object)
        .map(|m| Entry {
            raw: m.clone(),
            fields: m.get("fieldsV1").map(decode_fields).unwrap_or_default(),
        })
        .collect()
}

pub(super) fn write_entries(obj: &mut Value, entries: &[Entry]) {
    let Value::Object(root) = obj else {
        return;
    };
    let meta = object_member(root, "metadata");
    if entries.is_empty() {
        meta.remove("managedFields");
    } else {
        let list = entries.iter().map(Entry::to_json).collect();
        meta.insert("managedFields".into(), Value::Array(list));
    }
}

/// After a non-apply write (POST/PUT/PATCH by `manager`, operation "Update"), record in `new.metadata.managedFields` the fields that changed between `old` and `new` (all of new's fields on create) as owned by (manager, "Update"), removing them from other managers' entries. `subresource` is Some("status") for status writes (the entry then carries "subresource":"status").
///
/// Main-resource writes look at everything but `status`; status writes only at `status`. Fields
/// that the write removed are dropped from every entry. The entries start from `new`'s own
/// `managedFields` when it has them (a client may reset them) and from `old`'s otherwise.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    api_version: &str,
    time: &str,
    subresource: Option<&str>,
) {
    if !new.is_object() {
        return;
    }
    let kind = new
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    let scope = if subresource == Some("status") {
        Scope::Status
    } else {
        Scope::Main
    };
    // Non-strict field sets never fail.
    let fields_of = |v: &Value| object_fields(v, &kind, scope, false).unwrap_or_default();
    let new_set = fields_of(new);
    let old_set = old.map(fields_of).unwrap_or_default();
    let changed: FieldSet = new_set
        .iter()
        .filter(|p| {
            !old_set.contains(*p)
                || (matches!(p.last(), Some(PathStep::Field(_)))
                    && !opt_json_eq(old.and_then(|o| value_at(o, p)), value_at(new, p)))
        })
        .cloned()
        .collect();
    let removed: FieldSet = old_set.difference(&new_set).cloned().collect();

    let base = managed_fields_of(new)
        .or_else(|| old.and_then(managed_fields_of))
        .cloned();
    let mut entries = read_entries(base.as_ref());
    if !changed.is_empty() || !removed.is_empty() {
        for entry in &mut entries {
            entry
                .fields
                .retain(|p| !changed.contains(p) && !removed.contains(p));
        }
        if !changed.is_empty() {
            let own = entries
                .iter()
                .position(|e| e.is(manager, "Update", api_version, subresource));
            match own {
                Some(i) => {
                    entries[i].fields.extend(changed);
                    entries[i].raw.insert("time".into(), time.into());
                }
                None => entries.push(Entry::new(
                    manager,
                    "Update",
                    api_version,
                    time,
                    subresource,
                    changed,
                )),
            }
        }
        entries.retain(|e| !e.fields.is_empty());
    }
    write_entries(new, &entries);
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::*;
    use serde_json::json;

    // ---- record_update / FieldsV1 ----

    #[test]
    pub(super) fn record_update_on_create_owns_everything() {
        let mut obj = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c", "uid": "u1", "labels": {"a": "b"}}, "data": {"k": "v"}});
        record_update(None, &mut obj, "kubectl-create", "v1", T1, None);
        assert_eq!(
            entries_of(&obj),
            vec![json!({
                "manager": "kubectl-create", "operation": "Update", "apiVersion": "v1", "time": T1,
                "fieldsType": "FieldsV1",
                "fieldsV1": {"f:data": {"f:k": {}}, "f:metadata": {"f:labels": {"f:a": {}}}}
            })]
        );
    }

    #[test]
    pub(super) fn record_update_on_change_moves_only_changed_fields() {
        let mut created = json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "c"}, "data": {"a": "1", "b": "2", "gone": "x"}});
        record_update(None, &mut created, "creator", "v1", T1, None);
        let mut edited = created.clone();
        edited["data"] = json!({"a": "1", "b": "20", "c": "3"});
        record_update(Some(&created), &mut edited, "editor", "v1", T2, None);
        assert_eq!(
            entry(&edited, "creator", "Update").unwrap()["fieldsV1"],
            json!({"f:data": {"f:a": {}}})
        );
        let e = entry(&edited, "editor", "Update").unwrap();
        assert_eq!(e["fieldsV1"], json!({"f:data": {"f:b": {}, "f:c": {}}}));
        assert_eq!(e["time"], T2);

        // A no-op write leaves the bookkeeping alone, even if the new object omits it.
        let mut same = edited.clone();
        same["metadata"]
            .as_object_mut()
            .unwrap()
            .remove("managedFields");
        record_update(Some(&edited), &mut same, "other", "v1", "later", None);
        assert_eq!(same, edited);
    }

    #[test]
    pub(super) fn record_update_status_subresource() {
        let mut live = deployment(2, "nginx:1");
        record_update(None, &mut live, "kubectl", "apps/v1", T1, None);
        let mut new = live.clone();
        new["status"] =
            json!({"replicas": 2, "conditions": [{"type": "Available", "status": "True"}]});
        record_update(
            Some(&live),
            &mut new,
            "controller",
            "apps/v1",
            T2,
            Some("status"),
        );
        let e = entry(&new, "controller", "Update").unwrap();
        assert_eq!(e["subresource"], "status");
        assert_eq!(
            e["fieldsV1"],
            json!({"f:status": {"f:replicas": {}, "f:conditions": {
                "k:{\"type\":\"Available\"}": {".": {}, "f:status": {}, "f:type": {}}}}})
        );
        // The main-resource entry is untouched by a status write.
        assert_eq!(
            entry(&new, "kubectl", "Update"),
            entry(&live, "kubectl", "Update")
        );
    }
}
