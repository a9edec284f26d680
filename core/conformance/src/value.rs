//! Values and expectations: the `{"var"}` / `{"str_repeat"}` forms that make
//! values, and matching a field against an expected value (`ne`, `one_of`,
//! `present`, objects by their listed keys, arrays item by item).
//!
//! A field that does not exist is `None` ("absent"), which only `null` and
//! `{"present": false}` accept.

use std::collections::HashMap;

use serde_json::{Number, Value};

const VALUE_OPERATORS: &[&str] = &["var", "str_repeat"];
const MATCH_OPERATORS: &[&str] = &["ne", "one_of", "present"];
const MODIFIERS: &[&str] = &["add", "times"];

/// Saved values of a case, by name.
pub(crate) type Values = HashMap<String, Value>;

/// Whether `v` is an operator object: exactly one operator key, plus
/// modifiers only.
pub(crate) fn is_operator(v: &Value) -> bool {
    let Some(obj) = v.as_object() else {
        return false;
    };
    let main = obj
        .keys()
        .filter(|k| VALUE_OPERATORS.contains(&k.as_str()) || MATCH_OPERATORS.contains(&k.as_str()))
        .count();
    main == 1
        && obj.keys().all(|k| {
            VALUE_OPERATORS.contains(&k.as_str())
                || MATCH_OPERATORS.contains(&k.as_str())
                || MODIFIERS.contains(&k.as_str())
        })
}

fn is_match_operator(v: &Value) -> bool {
    is_operator(v)
        && v.as_object()
            .is_some_and(|o| o.keys().any(|k| MATCH_OPERATORS.contains(&k.as_str())))
}

/// Resolves the value forms in `spec`, recursively.
pub(crate) fn resolve(spec: &Value, values: &Values) -> Result<Value, String> {
    if is_operator(spec) {
        if let Some(name) = spec.get("var") {
            let name = name.as_str().ok_or("\"var\" takes a name")?;
            let v = values
                .get(name)
                .ok_or_else(|| format!("no saved value {name:?}"))?;
            return match spec.get("add") {
                None => Ok(v.clone()),
                Some(add) => add_numbers(v, add)
                    .ok_or_else(|| format!("cannot add {add} to the saved value {name:?} ({v})")),
            };
        }
        if let Some(s) = spec.get("str_repeat") {
            let s = s.as_str().ok_or("\"str_repeat\" takes a string")?;
            let times = spec
                .get("times")
                .and_then(Value::as_u64)
                .ok_or("\"str_repeat\" needs a count \"times\"")?;
            return Ok(Value::String(s.repeat(times as usize)));
        }
    }
    match spec {
        Value::Object(obj) => obj
            .iter()
            .map(|(k, v)| Ok((k.clone(), resolve(v, values)?)))
            .collect::<Result<_, String>>()
            .map(Value::Object),
        Value::Array(items) => items
            .iter()
            .map(|v| resolve(v, values))
            .collect::<Result<_, _>>()
            .map(Value::Array),
        other => Ok(other.clone()),
    }
}

fn add_numbers(a: &Value, b: &Value) -> Option<Value> {
    if let (Some(x), Some(y)) = (a.as_i64(), b.as_i64()) {
        return Some(Value::Number(x.checked_add(y)?.into()));
    }
    if let (Some(x), Some(y)) = (a.as_u64(), b.as_u64()) {
        return Some(Value::Number(x.checked_add(y)?.into()));
    }
    Number::from_f64(a.as_f64()? + b.as_f64()?).map(Value::Number)
}

/// Deep equality where `1` equals `1.0` and booleans only equal booleans.
pub(crate) fn equal(expected: &Value, actual: &Value) -> bool {
    match (expected, actual) {
        (Value::Number(a), Value::Number(b)) => match (a.as_i64(), b.as_i64()) {
            (Some(x), Some(y)) => x == y,
            _ => match (a.as_u64(), b.as_u64()) {
                (Some(x), Some(y)) => x == y,
                _ => match (a.as_f64(), b.as_f64()) {
                    (Some(x), Some(y)) => (x - y).abs() < 1e-9,
                    _ => false,
                },
            },
        },
        (Value::Array(a), Value::Array(b)) => {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| equal(x, y))
        }
        (Value::Object(a), Value::Object(b)) => {
            a.len() == b.len() && a.iter().all(|(k, x)| b.get(k).is_some_and(|y| equal(x, y)))
        }
        (a, b) => a == b,
    }
}

/// How an actual value is shown in a message.
pub(crate) fn show(actual: Option<&Value>) -> String {
    match actual {
        None => "<absent>".to_owned(),
        Some(v) => short(v),
    }
}

/// A value's JSON text, cut at 300 characters.
pub(crate) fn short(v: &Value) -> String {
    let mut s = v.to_string();
    if s.len() > 300 {
        let mut cut = 300;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
        s.push('…');
    }
    s
}

/// Matches `actual` against `expected`; the error says what differs, after
/// `what` (e.g. `field status`).
pub(crate) fn check(
    expected: &Value,
    actual: Option<&Value>,
    what: &str,
    values: &Values,
) -> Result<(), String> {
    let fail = |want: String| Err(format!("{what}: expected {want}, got {}", show(actual)));
    if is_match_operator(expected) {
        if let Some(other) = expected.get("ne") {
            let other = resolve(other, values)?;
            if actual.is_none_or(|a| equal(&other, a)) {
                return fail(format!("anything but {}", short(&other)));
            }
        } else if let Some(options) = expected.get("one_of") {
            let options = resolve(options, values)?;
            let list = options.as_array().ok_or("\"one_of\" takes a list")?;
            if !actual.is_some_and(|a| list.iter().any(|o| equal(o, a))) {
                return fail(format!("one of {}", short(&options)));
            }
        } else if let Some(present) = expected.get("present") {
            let want = present.as_bool().ok_or("\"present\" takes a boolean")?;
            let is = actual.is_some_and(|a| !a.is_null());
            if is != want {
                return fail(if want { "a value" } else { "no value" }.to_owned());
            }
        }
        return Ok(());
    }
    if is_operator(expected) {
        let want = resolve(expected, values)?;
        return match actual {
            Some(a) if equal(&want, a) => Ok(()),
            _ => fail(short(&want)),
        };
    }
    match expected {
        Value::Null => match actual {
            None | Some(Value::Null) => Ok(()),
            Some(_) => fail("null or absent".to_owned()),
        },
        Value::Object(keys) => {
            let Some(Value::Object(obj)) = actual else {
                return fail(format!(
                    "an object with {:?}",
                    keys.keys().collect::<Vec<_>>()
                ));
            };
            for (k, v) in keys {
                check(v, obj.get(k), &format!("{what}.{k}"), values)?;
            }
            Ok(())
        }
        Value::Array(items) => {
            let Some(Value::Array(got)) = actual else {
                return fail(short(expected));
            };
            if got.len() != items.len() {
                return fail(short(expected));
            }
            for (i, (e, a)) in items.iter().zip(got).enumerate() {
                check(e, Some(a), &format!("{what}[{i}]"), values)?;
            }
            Ok(())
        }
        scalar => match actual {
            Some(a) if equal(scalar, a) => Ok(()),
            _ => fail(short(scalar)),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn vals() -> Values {
        HashMap::from([
            ("g1".to_owned(), json!(3)),
            ("id1".to_owned(), json!("sb_x")),
        ])
    }

    #[test]
    fn value_forms_resolve() {
        let v = vals();
        assert_eq!(resolve(&json!({"var": "g1", "add": 1}), &v), Ok(json!(4)));
        assert_eq!(
            resolve(&json!({"str_repeat": "ab", "times": 3}), &v),
            Ok(json!("ababab"))
        );
        assert_eq!(
            resolve(&json!({"name": {"var": "id1"}, "n": [{"var": "g1"}]}), &v),
            Ok(json!({"name": "sb_x", "n": [3]}))
        );
        assert!(resolve(&json!({"var": "nope"}), &v).is_err());
    }

    #[test]
    fn matching_follows_the_readme() {
        let v = vals();
        let ok = |e: Value, a: Option<Value>| check(&e, a.as_ref(), "f", &v).is_ok();
        assert!(ok(json!(1), Some(json!(1.0))));
        assert!(!ok(json!(1), Some(json!(true))));
        assert!(!ok(json!(true), Some(json!(1))));
        assert!(ok(json!(null), None));
        assert!(ok(json!(null), Some(json!(null))));
        assert!(!ok(json!(null), Some(json!(0))));
        assert!(ok(
            json!({"cpus": null, "env": {"A": "b"}}),
            Some(json!({"env": {"A": "b", "C": "d"}, "x": 1}))
        ));
        assert!(!ok(
            json!({"env": {"A": "b"}}),
            Some(json!({"env": {"A": "c"}}))
        ));
        assert!(ok(json!(["a", "b"]), Some(json!(["a", "b"]))));
        assert!(!ok(json!(["a"]), Some(json!(["a", "b"]))));
        assert!(ok(json!({"ne": {"var": "id1"}}), Some(json!("sb_y"))));
        assert!(!ok(json!({"ne": {"var": "id1"}}), Some(json!("sb_x"))));
        assert!(!ok(json!({"ne": "x"}), None));
        assert!(ok(json!({"one_of": ["a", "b"]}), Some(json!("b"))));
        assert!(!ok(json!({"one_of": ["a", "b"]}), Some(json!("c"))));
        assert!(ok(json!({"present": true}), Some(json!("x"))));
        assert!(!ok(json!({"present": true}), Some(json!(null))));
        assert!(ok(json!({"present": false}), None));
        assert!(ok(json!({"var": "g1", "add": 1}), Some(json!(4))));
        assert!(!ok(json!({"var": "g1"}), None));
    }

    #[test]
    fn mismatches_say_what_and_how() {
        let v = vals();
        let e = check(
            &json!("running"),
            Some(&json!("stopped")),
            "field status",
            &v,
        );
        assert_eq!(
            e,
            Err("field status: expected \"running\", got \"stopped\"".to_owned())
        );
        let e = check(
            &json!({"env": {"A": "b"}}),
            Some(&json!({"env": {}})),
            "field config",
            &v,
        );
        assert_eq!(
            e,
            Err("field config.env.A: expected \"b\", got <absent>".to_owned())
        );
    }
}
