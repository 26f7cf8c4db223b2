//! Intrinsic functions rendered as patterns: the strings a template value can take, with
//! intrinsics kept symbolic, and the IAM statements of a policy.

use super::*;

/// The strings a value can take, with intrinsics kept symbolic: `Fn::Sub` gives its template
/// (`arn:${AWS::Partition}:s3:::${Bucket}/${DmsPrefix}*`), `Ref` gives `${Name}`, `Fn::GetAtt`
/// gives `${Res.Attr}`, `Fn::If` gives both branches, `Fn::Join` joins the pieces' renderings.
pub(super) fn render(v: &Value) -> Vec<String> {
    match v {
        Value::String(s) => vec![s.clone()],
        Value::Number(n) => vec![n.to_string()],
        Value::Bool(b) => vec![b.to_string()],
        Value::Array(items) => items.iter().flat_map(render).collect(),
        Value::Object(m) if m.len() == 1 => {
            let (k, a) = m.iter().next().expect("one key");
            match k.as_str() {
                "Ref" if a == "AWS::NoValue" => vec![],
                "Ref" => vec![format!("${{{}}}", a.as_str().unwrap_or("?"))],
                "Fn::Sub" => match a {
                    Value::String(s) => vec![s.clone()],
                    Value::Array(x) => vec![x[0].as_str().unwrap_or("?").to_string()],
                    _ => vec!["?".into()],
                },
                "Fn::GetAtt" => {
                    let parts: Vec<&str> = match a {
                        Value::Array(x) => x.iter().filter_map(Value::as_str).collect(),
                        Value::String(s) => s.split('.').collect(),
                        _ => vec![],
                    };
                    vec![format!("${{{}}}", parts.join("."))]
                }
                "Fn::If" => a
                    .as_array()
                    .map(|x| x.iter().skip(1).flat_map(render).collect())
                    .unwrap_or_default(),
                "Fn::Join" => {
                    let sep = a[0].as_str().unwrap_or("");
                    let pieces: Vec<String> = a[1]
                        .as_array()
                        .map(|x| x.iter().map(|p| render(p).join("|")).collect())
                        .unwrap_or_default();
                    vec![pieces.join(sep)]
                }
                other => vec![format!("<{other}>")],
            }
        }
        _ => vec![v.to_string()],
    }
}

/// Statements of a policy document; `Fn::If` items contribute both branches.
pub(super) fn statements(doc: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    let items = match &doc["Statement"] {
        Value::Array(a) => a.clone(),
        Value::Null => vec![],
        one => vec![one.clone()],
    };
    for s in items {
        if let Some(branches) = s.get("Fn::If").and_then(Value::as_array) {
            for b in branches.iter().skip(1) {
                if b.get("Sid").is_some() || b.get("Effect").is_some() {
                    out.push(b.clone());
                }
            }
        } else {
            out.push(s);
        }
    }
    out
}

pub(super) fn strings(v: &Value) -> Vec<String> {
    match v {
        Value::Null => vec![],
        Value::Array(a) => a.iter().flat_map(render).collect(),
        one => render(one),
    }
}
