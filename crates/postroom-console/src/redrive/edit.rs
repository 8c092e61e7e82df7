//! Edit-and-redrive: the operator's corrected body, checked (the envelope id may not change,
//! so the original and the corrected copy can never both take effect) and compared with the
//! parked one field by field for the audit.

use serde_json::{Value, json};

/// Why an edit is refused.
#[derive(Debug, PartialEq, Eq)]
pub struct EditRefused(pub String);

/// The changes from `before` to `after` as a list of `{path, before, after}` (JSON pointers),
/// or, when either is not JSON, the two texts; each value cut short as the audit keeps it
/// ([`crate::audit::bounded_value`]).
#[must_use]
pub fn diff(before: &[u8], after: &[u8]) -> Value {
    match (
        serde_json::from_slice::<Value>(before),
        serde_json::from_slice::<Value>(after),
    ) {
        (Ok(a), Ok(b)) => {
            let mut out = Vec::new();
            walk("", &a, &b, &mut out);
            Value::Array(out)
        }
        _ => json!([{
            "path": "",
            "before": bounded(&Value::String(String::from_utf8_lossy(before).into_owned())),
            "after": bounded(&Value::String(String::from_utf8_lossy(after).into_owned())),
        }]),
    }
}

fn bounded(v: &Value) -> Value {
    crate::audit::bounded_value(Some(v))
}

fn change(path: &str, a: Option<&Value>, b: Option<&Value>) -> Value {
    json!({
        "path": path,
        "before": crate::audit::bounded_value(a),
        "after": crate::audit::bounded_value(b),
    })
}

fn escape(key: &str) -> String {
    key.replace('~', "~0").replace('/', "~1")
}

fn walk(path: &str, a: &Value, b: &Value, out: &mut Vec<Value>) {
    match (a, b) {
        (Value::Object(x), Value::Object(y)) => {
            let keys: std::collections::BTreeSet<&String> = x.keys().chain(y.keys()).collect();
            for k in keys {
                let p = format!("{path}/{}", escape(k));
                match (x.get(k), y.get(k)) {
                    (Some(va), Some(vb)) => walk(&p, va, vb, out),
                    (va, vb) => out.push(change(&p, va, vb)),
                }
            }
        }
        (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
            for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                walk(&format!("{path}/{i}"), va, vb, out);
            }
        }
        _ if a == b => {}
        _ => out.push(change(path, Some(a), Some(b))),
    }
}

/// Check an edited body against the parked one: it must differ, and where the parked body
/// is an envelope its `id` must stay.
pub fn check(before: &[u8], after: &[u8]) -> Result<(), EditRefused> {
    if before == after {
        return Err(EditRefused("the body is unchanged".into()));
    }
    let id_of = |b: &[u8]| {
        serde_json::from_slice::<Value>(b)
            .ok()
            .and_then(|v| v.get("id").cloned())
    };
    if let Some(id) = id_of(before)
        && id_of(after).as_ref() != Some(&id)
    {
        return Err(EditRefused(format!(
            "the message id must stay {id}: a copy with another id could take effect beside the original"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn diffs_fields_by_pointer() {
        let d = diff(
            br#"{"id":"a","data":{"sku":null,"qty":1,"tags":["x"]}}"#,
            br#"{"id":"a","data":{"sku":"A-1","qty":1,"tags":["y"]}}"#,
        );
        assert_eq!(
            d,
            json!([
                {"path": "/data/sku", "before": null, "after": "A-1"},
                {"path": "/data/tags/0", "before": "x", "after": "y"}
            ])
        );
        let d = diff(b"{not json", br#"{"id":"a"}"#);
        assert_eq!(d[0]["before"], "{not json");
    }

    #[test]
    fn keeps_the_id() {
        assert!(check(br#"{"id":"a","x":1}"#, br#"{"id":"a","x":2}"#).is_ok());
        assert!(check(br#"{"id":"a","x":1}"#, br#"{"id":"b","x":2}"#).is_err());
        assert!(check(br#"{"id":"a","x":1}"#, br#"{"x":2}"#).is_err());
        assert!(check(b"same", b"same").is_err());
        assert!(check(b"{corrupt", br#"{"id":"c"}"#).is_ok());
    }
}
