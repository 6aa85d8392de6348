//! Chat templates: the Jinja template an instruct model's `tokenizer_config.json` (or its
//! `chat_template.jinja`) carries, rendered through `minijinja` the way `transformers`'
//! `apply_chat_template` renders it with `jinja2`:
//! - blocks trimmed and left-stripped (`trim_blocks`, `lstrip_blocks`), loop controls,
//!   Python's string methods (`.strip()`, `.startswith()`, ...);
//! - the variables `messages`, `add_generation_prompt` and the tokenizer's special
//!   tokens (`bos_token`, `eos_token`, `pad_token`, `unk_token`), plus any the caller adds;
//! - the functions `raise_exception(message)` and `strftime_now(format)`, and a `tojson`
//!   filter that writes JSON as Python's `json.dumps(..., ensure_ascii=False)` does.

use std::path::Path;

use minijinja::value::Kwargs;
use minijinja::{Environment, Error, ErrorKind, Value};
use serde_json::{Map, Value as Json};

use super::{Result, tok_err};

/// The special tokens a template may name, as `tokenizer_config.json` lists them.
const SPECIAL_TOKENS: [&str; 4] = ["bos_token", "eos_token", "pad_token", "unk_token"];

/// An instruct model's chat template with the special tokens it may print.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatTemplate {
    source: String,
    tokens: Map<String, Json>,
}

impl ChatTemplate {
    /// A template from its source and the special tokens it may print (`bos_token`, ...).
    ///
    /// # Errors
    /// A template that does not parse, with minijinja's message.
    pub fn new(source: impl Into<String>, tokens: Map<String, Json>) -> Result<Self> {
        let template = Self {
            source: source.into(),
            tokens,
        };
        environment()
            .template_from_str(&template.source)
            .map_err(|e| tok_err("chat template", describe(&e)))?;
        Ok(template)
    }

    /// The template of the checkpoint folder `dir`: `chat_template.jinja` when there is
    /// one, else `tokenizer_config.json`'s `chat_template` (a string, or a list of named
    /// templates of which `default` is taken), with that file's special tokens. `None`
    /// when the folder has no template.
    ///
    /// # Errors
    /// A file that cannot be read or parsed, or a template that does not parse, named.
    pub fn from_pretrained(dir: impl AsRef<Path>) -> Result<Option<Self>> {
        let dir = dir.as_ref();
        let config_path = dir.join("tokenizer_config.json");
        let config: Map<String, Json> = match std::fs::read_to_string(&config_path) {
            Ok(text) => serde_json::from_str(&text)
                .map_err(|e| tok_err(&config_path.display().to_string(), e))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Map::new(),
            Err(e) => return Err(tok_err(&config_path.display().to_string(), e)),
        };
        let jinja = dir.join("chat_template.jinja");
        let source = if jinja.is_file() {
            Some(
                std::fs::read_to_string(&jinja)
                    .map_err(|e| tok_err(&jinja.display().to_string(), e))?,
            )
        } else {
            config_template(&config).map_err(|e| tok_err(&config_path.display().to_string(), e))?
        };
        let Some(source) = source else {
            return Ok(None);
        };
        let tokens = SPECIAL_TOKENS
            .iter()
            .filter_map(|name| {
                let token = match config.get(*name)? {
                    Json::String(s) => s.clone(),
                    // An AddedToken: {"content": "<s>", "lstrip": false, ...}.
                    Json::Object(o) => o.get("content")?.as_str()?.to_string(),
                    _ => return None,
                };
                Some((name.to_string(), Json::String(token)))
            })
            .collect();
        Self::new(source, tokens).map(Some)
    }

    /// The template's source.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The special token `name` (`bos_token`, `eos_token`, ...), when the tokenizer has it.
    pub fn special_token(&self, name: &str) -> Option<&str> {
        self.tokens.get(name).and_then(Json::as_str)
    }

    /// The prompt for `messages` (a list of `{"role", "content"}` objects), ending with
    /// the assistant's header when `add_generation_prompt`.
    ///
    /// # Errors
    /// Messages that are not such a list, or what the template raises, with its message.
    pub fn render(&self, messages: &Json, add_generation_prompt: bool) -> Result<String> {
        self.render_with(messages, add_generation_prompt, &Map::new())
    }

    /// [`Self::render`] with more variables for the template (Llama 3.2 reads
    /// `date_string`, others `tools` or `enable_thinking`).
    ///
    /// # Errors
    /// As [`Self::render`].
    pub fn render_with(
        &self,
        messages: &Json,
        add_generation_prompt: bool,
        extra: &Map<String, Json>,
    ) -> Result<String> {
        check_messages(messages)?;
        let mut context = self.tokens.clone();
        context.extend(extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        context.insert("messages".into(), messages.clone());
        context.insert(
            "add_generation_prompt".into(),
            Json::Bool(add_generation_prompt),
        );
        let env = environment();
        let template = env
            .template_from_str(&self.source)
            .map_err(|e| tok_err("chat template", describe(&e)))?;
        template
            .render(Value::from_serialize(&context))
            .map_err(|e| tok_err("chat template", describe(&e)))
    }
}

/// `tokenizer_config.json`'s `chat_template`: a string, or `[{"name", "template"}, ...]`
/// of which `default` is the one `apply_chat_template` uses without a name.
fn config_template(config: &Map<String, Json>) -> std::result::Result<Option<String>, String> {
    match config.get("chat_template") {
        None | Some(Json::Null) => Ok(None),
        Some(Json::String(s)) => Ok(Some(s.clone())),
        Some(Json::Array(named)) => {
            let pick = |want: &str| {
                named.iter().find_map(|t| {
                    (t.get("name")?.as_str()? == want)
                        .then(|| t.get("template")?.as_str().map(str::to_string))
                        .flatten()
                })
            };
            pick("default").map(Some).ok_or_else(|| {
                "chat_template is a list of named templates without a \"default\"".to_string()
            })
        }
        Some(other) => Err(format!(
            "chat_template must be a string or a list of named templates, got {other}"
        )),
    }
}

/// The messages must be a list of objects, each with a string `role`.
fn check_messages(messages: &Json) -> Result<()> {
    let Some(list) = messages.as_array() else {
        return Err(tok_err(
            "chat messages",
            "expected a list of {\"role\", \"content\"} objects",
        ));
    };
    for (i, m) in list.iter().enumerate() {
        if !m.get("role").is_some_and(Json::is_string) {
            return Err(tok_err(
                "chat messages",
                format!("message {i} has no string \"role\": {m}"),
            ));
        }
    }
    Ok(())
}

/// minijinja's message with its cause: a template's own `raise_exception` text comes
/// first.
fn describe(e: &Error) -> String {
    match (e.kind(), e.detail()) {
        (ErrorKind::InvalidOperation, Some(detail)) => detail.to_string(),
        _ => e.to_string(),
    }
}

/// The environment `transformers` renders chat templates in, as far as templates can
/// tell.
fn environment() -> Environment<'static> {
    let mut env = Environment::new();
    env.set_trim_blocks(true);
    env.set_lstrip_blocks(true);
    env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
    env.add_function(
        "raise_exception",
        |message: String| -> std::result::Result<Value, Error> {
            Err(Error::new(ErrorKind::InvalidOperation, message))
        },
    );
    env.add_function("strftime_now", strftime_now);
    env.add_filter("tojson", tojson);
    env
}

/// Python's `json.dumps(value, ensure_ascii=False, indent=indent)`: `", "` and `": "`
/// between items on one line, or `indent` spaces a level and `": "` with an indent.
fn tojson(value: &Value, kwargs: Kwargs) -> std::result::Result<Value, Error> {
    let indent: Option<usize> = kwargs.get("indent")?;
    // Python's other options change nothing the templates print.
    for name in ["ensure_ascii", "separators", "sort_keys"] {
        let _: Option<Value> = kwargs.get(name)?;
    }
    kwargs.assert_all_used()?;
    let json = serde_json::to_value(value)
        .map_err(|e| Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    let mut out = Vec::new();
    let written = match indent {
        Some(n) => {
            let spaces = vec![b' '; n];
            let formatter = serde_json::ser::PrettyFormatter::with_indent(&spaces);
            serde::Serialize::serialize(
                &json,
                &mut serde_json::Serializer::with_formatter(&mut out, formatter),
            )
        }
        None => serde::Serialize::serialize(
            &json,
            &mut serde_json::Serializer::with_formatter(&mut out, PythonCompact),
        ),
    };
    written.map_err(|e| Error::new(ErrorKind::InvalidOperation, e.to_string()))?;
    Ok(Value::from_safe_string(
        String::from_utf8(out).unwrap_or_default(),
    ))
}

/// Python's default JSON separators, `", "` and `": "`.
struct PythonCompact;

impl serde_json::ser::Formatter for PythonCompact {
    fn begin_array_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        comma_unless_first(writer, first)
    }

    fn begin_object_key<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
        first: bool,
    ) -> std::io::Result<()> {
        comma_unless_first(writer, first)
    }

    fn begin_object_value<W: ?Sized + std::io::Write>(
        &mut self,
        writer: &mut W,
    ) -> std::io::Result<()> {
        writer.write_all(b": ")
    }
}

fn comma_unless_first<W: ?Sized + std::io::Write>(
    writer: &mut W,
    first: bool,
) -> std::io::Result<()> {
    if first {
        Ok(())
    } else {
        writer.write_all(b", ")
    }
}

const MONTHS: [&str; 12] = [
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
];

/// Today's date (UTC) in a `strftime` format of `%d`, `%m`, `%Y`, `%y`, `%b`, `%B` and
/// `%%`, as Llama 3's templates ask for it (`strftime_now("%d %b %Y")`).
fn strftime_now(format: String) -> std::result::Result<String, Error> {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    strftime(&format, secs / 86_400)
}

/// [`strftime_now`] for the day `days` after 1970-01-01.
fn strftime(format: &str, days: u64) -> std::result::Result<String, Error> {
    let (year, month, day) = civil_from_days(days as i64);
    let mut out = String::new();
    let mut chars = format.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(&format!("{day:02}")),
            Some('m') => out.push_str(&format!("{month:02}")),
            Some('Y') => out.push_str(&year.to_string()),
            Some('y') => out.push_str(&format!("{:02}", year.rem_euclid(100))),
            Some('B') => out.push_str(MONTHS[month as usize - 1]),
            Some('b') => out.push_str(&MONTHS[month as usize - 1][..3]),
            Some('%') => out.push('%'),
            other => {
                return Err(Error::new(
                    ErrorKind::InvalidOperation,
                    format!(
                        "strftime_now supports %d %m %Y %y %b %B and %%, not %{}",
                        other.map(String::from).unwrap_or_default()
                    ),
                ));
            }
        }
    }
    Ok(out)
}

/// The proleptic Gregorian date of a day count from 1970-01-01 (Hinnant's
/// `civil_from_days`).
fn civil_from_days(z: i64) -> (i64, u32, u32) {
    let z = z + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_and_json_print_as_python_prints_them() {
        // 2024-07-26 is day 19930 after the epoch; 2000-02-29 is day 11016.
        assert_eq!(strftime("%d %b %Y", 19_930).unwrap(), "26 Jul 2024");
        assert_eq!(
            strftime("%Y-%m-%d, %B %y %%", 11_016).unwrap(),
            "2000-02-29, February 00 %"
        );
        assert!(
            strftime("%H", 0)
                .unwrap_err()
                .to_string()
                .contains("not %H")
        );
        let t = ChatTemplate::new(
            "{{ x | tojson }}|{{ x | tojson(indent=2) }}|{{ raise_exception('no') if bad }}",
            Map::new(),
        )
        .unwrap();
        let x = serde_json::json!({"a": [1, "é"], "b": {}});
        let mut extra = Map::new();
        extra.insert("x".into(), x);
        let out = t
            .render_with(&serde_json::json!([]), false, &extra)
            .unwrap();
        assert_eq!(
            out,
            "{\"a\": [1, \"é\"], \"b\": {}}|{\n  \"a\": [\n    1,\n    \"é\"\n  ],\n  \"b\": {}\n}|"
        );
        extra.insert("bad".into(), Json::Bool(true));
        let e = t
            .render_with(&serde_json::json!([]), false, &extra)
            .unwrap_err();
        assert_eq!(e.to_string(), "tokenizer: chat template: no");
    }

    #[test]
    fn bad_templates_and_messages_are_named() {
        let e = ChatTemplate::new("{% for %}", Map::new())
            .unwrap_err()
            .to_string();
        assert!(e.starts_with("tokenizer: chat template: "), "{e}");
        let t = ChatTemplate::new("{{ messages[0].content }}", Map::new()).unwrap();
        let e = t
            .render(&serde_json::json!({"role": "user"}), true)
            .unwrap_err();
        assert!(e.to_string().contains("expected a list"), "{e}");
        let e = t
            .render(&serde_json::json!([{"content": "hi"}]), true)
            .unwrap_err();
        assert!(
            e.to_string().contains("message 0 has no string \"role\""),
            "{e}"
        );
        let named = serde_json::json!({"chat_template": [{"name": "tool_use", "template": "x"}]});
        let e = config_template(named.as_object().unwrap()).unwrap_err();
        assert!(e.contains("without a \"default\""), "{e}");
    }
}
