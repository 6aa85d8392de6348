//! Training data from a user's own files, as `zoo train` reads them: plain text, JSON
//! Lines, CSV and TSV. Every row keeps its file and line, so an error points at the
//! place to fix: `train.csv:14: no value in column "label"`.
//!
//! - **Plain text** (`.txt`, `.text`, `.md`): documents separated by blank lines (a file
//!   without one is a single document), each a row with the field `text`.
//! - **JSON Lines** (`.jsonl`, `.ndjson`): one JSON object per line; a field is a string,
//!   a number (read as its text) or a list of those (`tokens`, `tags`).
//! - **CSV** (`.csv`) and **TSV** (`.tsv`, `.tab`): a header row names the columns. CSV
//!   fields may be quoted as RFC 4180 quotes them; TSV fields are taken as they stand.
//!
//! [`Labels`] maps the label names of a training file to class ids, and refuses a
//! validation row whose label it has not seen.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use serde_json::Value as Json;

use crate::error::{DataError, Result, read_to_string};

/// The layout of a data file, told by its extension.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// Documents separated by blank lines.
    Text,
    /// One JSON object per line.
    JsonLines,
    /// Comma-separated values with a header row.
    Csv,
    /// Tab-separated values with a header row.
    Tsv,
}

impl Format {
    /// The extensions each format is read from, for messages.
    pub const EXTENSIONS: &'static str = ".txt, .text, .md (plain text), .jsonl, .ndjson \
                                          (JSON Lines), .csv, .tsv or .tab";

    /// The format of `path`, by its extension.
    ///
    /// # Errors
    /// An extension that names none of them.
    pub fn of(path: &Path) -> Result<Self> {
        let ext = path
            .extension()
            .map(|e| e.to_string_lossy().to_lowercase())
            .unwrap_or_default();
        Ok(match ext.as_str() {
            "txt" | "text" | "md" => Self::Text,
            "jsonl" | "ndjson" => Self::JsonLines,
            "csv" => Self::Csv,
            "tsv" | "tab" => Self::Tsv,
            _ => {
                return Err(DataError::Invalid(format!(
                    "{}: cannot tell the data format from the extension {:?}; use {}",
                    path.display(),
                    ext,
                    Self::EXTENSIONS
                )));
            }
        })
    }

    /// Whether rows have named fields beyond `text` (all formats but plain text).
    pub fn has_fields(self) -> bool {
        self != Self::Text
    }
}

/// One field's value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// A string (a number is kept as its JSON text).
    Text(String),
    /// A list of strings (JSON Lines only).
    List(Vec<String>),
}

/// One row (a document of a text file) with the line it starts on, counting from 1.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Row {
    /// The line the row starts on.
    pub line: usize,
    /// Its fields by name.
    pub fields: BTreeMap<String, Value>,
}

/// The rows of one file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Records {
    /// The file.
    pub path: PathBuf,
    /// Its format.
    pub format: Format,
    /// The header's columns of a CSV or TSV file, in order (empty otherwise).
    pub columns: Vec<String>,
    /// The rows, in file order.
    pub rows: Vec<Row>,
}

fn invalid(path: &Path, line: Option<usize>, message: impl std::fmt::Display) -> DataError {
    match line {
        Some(line) => DataError::Invalid(format!("{}:{line}: {message}", path.display())),
        None => DataError::Invalid(format!("{}: {message}", path.display())),
    }
}

/// A JSON value as a field: strings and numbers as text, lists of those as a list.
fn json_value(value: &Json) -> Option<Value> {
    let scalar = |v: &Json| match v {
        Json::String(s) => Some(s.clone()),
        Json::Number(n) => Some(n.to_string()),
        Json::Bool(b) => Some(b.to_string()),
        _ => None,
    };
    match value {
        Json::Array(items) => items
            .iter()
            .map(scalar)
            .collect::<Option<_>>()
            .map(Value::List),
        other => scalar(other).map(Value::Text),
    }
}

impl Records {
    /// Reads `path` in the format its extension names.
    ///
    /// # Errors
    /// An unknown extension, a file that cannot be read, an empty file (no row), a line of
    /// JSON Lines that is not an object, a CSV/TSV row with more or fewer fields than the
    /// header, or a header with an empty or repeated column name; each names the file and
    /// the line.
    pub fn read(path: impl AsRef<Path>) -> Result<Self> {
        let path = path.as_ref();
        let format = Format::of(path)?;
        let text = read_to_string(path)?;
        let (columns, rows) = match format {
            Format::Text => (Vec::new(), documents(&text)),
            Format::JsonLines => (Vec::new(), json_lines(path, &text)?),
            Format::Csv | Format::Tsv => delimited(path, &text, format)?,
        };
        if rows.is_empty() {
            return Err(invalid(path, None, "the file holds no data"));
        }
        Ok(Self {
            path: path.to_path_buf(),
            format,
            columns,
            rows,
        })
    }

    /// Checks that every row has each of `fields` (for CSV/TSV, that the header names
    /// them), before any row is used.
    ///
    /// # Errors
    /// The first missing field, with the row's line and the fields it has.
    pub fn require(&self, fields: &[&str]) -> Result<()> {
        if matches!(self.format, Format::Csv | Format::Tsv)
            && let Some(missing) = fields
                .iter()
                .find(|f| !self.columns.iter().any(|c| c == *f))
        {
            return Err(invalid(
                &self.path,
                Some(1),
                format!(
                    "no column {missing:?} in the header (its columns: {})",
                    self.columns.join(", ")
                ),
            ));
        }
        for row in &self.rows {
            for field in fields {
                self.get(row, field)?;
            }
        }
        Ok(())
    }

    fn get<'a>(&self, row: &'a Row, field: &str) -> Result<&'a Value> {
        row.fields.get(field).ok_or_else(|| {
            let has: Vec<&str> = row.fields.keys().map(String::as_str).collect();
            let has = if has.is_empty() {
                "none".to_string()
            } else {
                has.join(", ")
            };
            invalid(
                &self.path,
                Some(row.line),
                format!("no field {field:?} (the row has {has})"),
            )
        })
    }

    /// The text of `field` in `row`.
    ///
    /// # Errors
    /// A missing field, an empty one, or a list where a text belongs, named with the file
    /// and line.
    pub fn text<'a>(&self, row: &'a Row, field: &str) -> Result<&'a str> {
        match self.get(row, field)? {
            Value::Text(s) if s.trim().is_empty() => Err(invalid(
                &self.path,
                Some(row.line),
                format!("field {field:?} is empty"),
            )),
            Value::Text(s) => Ok(s),
            Value::List(_) => Err(invalid(
                &self.path,
                Some(row.line),
                format!("field {field:?} is a list; a text belongs there"),
            )),
        }
    }

    /// The list of `field` in `row`.
    ///
    /// # Errors
    /// A missing field, an empty list, or a text where a list belongs.
    pub fn list<'a>(&self, row: &'a Row, field: &str) -> Result<&'a [String]> {
        match self.get(row, field)? {
            Value::List(items) if items.is_empty() => Err(invalid(
                &self.path,
                Some(row.line),
                format!("field {field:?} is an empty list"),
            )),
            Value::List(items) => Ok(items),
            Value::Text(_) => Err(invalid(
                &self.path,
                Some(row.line),
                format!("field {field:?} is a text; a list belongs there"),
            )),
        }
    }

    /// An error about `row`, with the file and line.
    pub fn error(&self, row: &Row, message: impl std::fmt::Display) -> DataError {
        invalid(&self.path, Some(row.line), message)
    }
}

/// The blank-line separated documents of a text, each with its first line.
fn documents(text: &str) -> Vec<Row> {
    let mut rows = Vec::new();
    let mut current: Vec<&str> = Vec::new();
    let mut start = 0;
    let flush = |current: &mut Vec<&str>, start: usize, rows: &mut Vec<Row>| {
        if !current.is_empty() {
            let doc = current.join("\n");
            rows.push(Row {
                line: start,
                fields: BTreeMap::from([("text".to_string(), Value::Text(doc))]),
            });
            current.clear();
        }
    };
    for (i, line) in text.lines().enumerate() {
        if line.trim().is_empty() {
            flush(&mut current, start, &mut rows);
        } else {
            if current.is_empty() {
                start = i + 1;
            }
            current.push(line);
        }
    }
    flush(&mut current, start, &mut rows);
    rows
}

fn json_lines(path: &Path, text: &str) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line_no = i + 1;
        if line.trim().is_empty() {
            continue;
        }
        let parsed: Json = serde_json::from_str(line)
            .map_err(|e| invalid(path, Some(line_no), format!("not JSON: {e}")))?;
        let Json::Object(object) = parsed else {
            return Err(invalid(
                path,
                Some(line_no),
                "not a JSON object (each line holds one {\"field\": value, ...})",
            ));
        };
        let mut fields = BTreeMap::new();
        for (name, value) in &object {
            if value.is_null() {
                continue; // a null is an absent field
            }
            let value = json_value(value).ok_or_else(|| {
                invalid(
                    path,
                    Some(line_no),
                    format!("field {name:?} is neither a string, a number nor a list of those"),
                )
            })?;
            fields.insert(name.clone(), value);
        }
        rows.push(Row {
            line: line_no,
            fields,
        });
    }
    Ok(rows)
}

fn delimited(path: &Path, text: &str, format: Format) -> Result<(Vec<String>, Vec<Row>)> {
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(if format == Format::Tsv { b'\t' } else { b',' })
        .quoting(format == Format::Csv)
        .has_headers(true)
        .flexible(false)
        .from_reader(text.as_bytes());
    let line_of = |e: &csv::Error| e.position().map(|p| p.line() as usize);
    let headers = reader
        .headers()
        .map_err(|e| invalid(path, line_of(&e), e))?
        .clone();
    let columns: Vec<String> = headers.iter().map(|h| h.trim().to_string()).collect();
    let mut seen = BTreeSet::new();
    for c in &columns {
        if c.is_empty() {
            return Err(invalid(
                path,
                Some(1),
                "the header has an empty column name",
            ));
        }
        if !seen.insert(c) {
            return Err(invalid(
                path,
                Some(1),
                format!("the header names {c:?} twice"),
            ));
        }
    }
    let mut rows = Vec::new();
    for record in reader.records() {
        let record = record.map_err(|e| {
            let why = match e.kind() {
                csv::ErrorKind::UnequalLengths {
                    expected_len, len, ..
                } => format!("{len} fields, but the header has {expected_len}"),
                _ => e.to_string(),
            };
            invalid(path, line_of(&e), why)
        })?;
        let line = record.position().map_or(0, |p| p.line() as usize);
        if record.iter().all(|f| f.trim().is_empty()) {
            continue;
        }
        let fields = columns
            .iter()
            .zip(record.iter())
            .map(|(c, v)| (c.clone(), Value::Text(v.to_string())))
            .collect();
        rows.push(Row { line, fields });
    }
    Ok((columns, rows))
}

/// Label names and their class ids: sorted as numbers when every name is an integer,
/// else as text, as HF's `run_glue` sorts its label list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Labels {
    names: Vec<String>,
}

impl Labels {
    /// The labels found in `field` of the training rows.
    ///
    /// # Errors
    /// A row without the field, or fewer than two labels.
    pub fn from_records(records: &Records, field: &str) -> Result<Self> {
        let mut names = BTreeSet::new();
        for row in &records.rows {
            match records.get(row, field)? {
                Value::Text(s) => {
                    names.insert(s.trim().to_string());
                }
                Value::List(items) => names.extend(items.iter().map(|s| s.trim().to_string())),
            }
        }
        let labels = Self::new(names.into_iter().collect());
        if labels.len() < 2 {
            return Err(invalid(
                &records.path,
                None,
                format!(
                    "field {field:?} holds {} label{} ({}); a classifier needs at least 2",
                    labels.len(),
                    if labels.len() == 1 { "" } else { "s" },
                    labels.names.join(", ")
                ),
            ));
        }
        Ok(labels)
    }

    /// Labels from names, sorted as [`Labels`] sorts them; repeated names kept once.
    pub fn new(mut names: Vec<String>) -> Self {
        if names.iter().all(|n| n.parse::<i64>().is_ok()) {
            names.sort_by_key(|n| n.parse::<i64>().unwrap_or(0));
        } else {
            names.sort();
        }
        names.dedup();
        Self { names }
    }

    /// Labels in a given order (a checkpoint's `id2label`).
    pub fn in_order(names: Vec<String>) -> Self {
        Self { names }
    }

    /// How many.
    pub fn len(&self) -> usize {
        self.names.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// The names by class id.
    pub fn names(&self) -> &[String] {
        &self.names
    }

    /// Whether every label of `other` is one of these.
    pub fn covers(&self, other: &Labels) -> bool {
        other.names.iter().all(|n| self.names.contains(n))
    }

    /// The class id of `name` in `row` of `records`.
    ///
    /// # Errors
    /// A label the training file does not hold, named with the file, line and field.
    pub fn id(&self, records: &Records, row: &Row, field: &str, name: &str) -> Result<usize> {
        let name = name.trim();
        self.names.iter().position(|n| n == name).ok_or_else(|| {
            records.error(
                row,
                format!(
                    "field {field:?}: label {name:?} is not among the {} labels of the \
                     training data ({})",
                    self.names.len(),
                    self.names.join(", ")
                ),
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(name: &str, text: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("zoo-data-records-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    fn err(name: &str, text: &str) -> String {
        let path = file(name, text);
        let e = Records::read(&path).unwrap_err().to_string();
        e.replace(&path.display().to_string(), name)
    }

    #[test]
    fn text_files_split_at_blank_lines() {
        let r = Records::read(file("a.txt", "one\ntwo\n\n\nthree\n  \nfour")).unwrap();
        let docs: Vec<(usize, &str)> = r
            .rows
            .iter()
            .map(|row| (row.line, r.text(row, "text").unwrap()))
            .collect();
        assert_eq!(docs, [(1, "one\ntwo"), (5, "three"), (7, "four")]);
        let one = Records::read(file("b.txt", "a\nb\nc\n")).unwrap();
        assert_eq!(one.rows.len(), 1);
    }

    #[test]
    fn json_lines_keep_lists_numbers_and_lines() {
        let r = Records::read(file(
            "a.jsonl",
            "{\"text\": \"hi\", \"label\": 3}\n\n{\"tokens\": [\"a\", \"b\"], \"tags\": [\"O\", 1]}\n",
        ))
        .unwrap();
        assert_eq!(r.rows[0].line, 1);
        assert_eq!(r.rows[1].line, 3);
        assert_eq!(r.text(&r.rows[0], "label").unwrap(), "3");
        assert_eq!(r.list(&r.rows[1], "tags").unwrap(), ["O", "1"]);
        assert_eq!(
            r.text(&r.rows[1], "text").unwrap_err().to_string(),
            format!(
                "{}:3: no field \"text\" (the row has tags, tokens)",
                r.path.display()
            )
        );
        assert!(r.list(&r.rows[1], "tokens").is_ok());
        assert!(
            r.text(&r.rows[1], "tags")
                .unwrap_err()
                .to_string()
                .ends_with(":3: field \"tags\" is a list; a text belongs there")
        );
    }

    #[test]
    fn csv_quotes_and_tsv_tabs() {
        let r = Records::read(file(
            "a.csv",
            "text,label\n\"Hello, world\",pos\n\"said \"\"no\"\"\",neg\n",
        ))
        .unwrap();
        assert_eq!(r.columns, ["text", "label"]);
        assert_eq!(r.text(&r.rows[0], "text").unwrap(), "Hello, world");
        assert_eq!(r.text(&r.rows[1], "text").unwrap(), "said \"no\"");
        assert_eq!(r.rows[1].line, 3);
        let t = Records::read(file("a.tsv", "source\ttarget\nab\"c\tx y\n")).unwrap();
        assert_eq!(t.text(&t.rows[0], "source").unwrap(), "ab\"c");
        assert_eq!(t.text(&t.rows[0], "target").unwrap(), "x y");
        assert!(r.require(&["text", "label"]).is_ok());
        assert_eq!(
            r.require(&["text", "category"]).unwrap_err().to_string(),
            format!(
                "{}:1: no column \"category\" in the header (its columns: text, label)",
                r.path.display()
            )
        );
    }

    #[test]
    fn bad_files_name_the_line() {
        assert_eq!(err("e.csv", ""), "e.csv: the file holds no data");
        assert_eq!(err("e2.txt", "\n  \n"), "e2.txt: the file holds no data");
        assert_eq!(
            err("r.csv", "text,label\na,b\nc,d,e\n"),
            "r.csv:3: 3 fields, but the header has 2"
        );
        assert_eq!(
            err("h.csv", "text,text\na,b\n"),
            "h.csv:1: the header names \"text\" twice"
        );
        assert_eq!(
            err("j.jsonl", "{\"text\": \"a\"}\n[1, 2]\n"),
            "j.jsonl:2: not a JSON object (each line holds one {\"field\": value, ...})"
        );
        assert!(
            err("k.jsonl", "{\"text\": \"a\"}\n{\"text\": \n").starts_with("k.jsonl:2: not JSON")
        );
        assert_eq!(
            err("n.jsonl", "{\"text\": {\"a\": 1}}\n"),
            "n.jsonl:1: field \"text\" is neither a string, a number nor a list of those"
        );
        assert!(err("x.parquet", "a").starts_with("x.parquet: cannot tell the data format"));
        let r = Records::read(file("empty.csv", "text,label\n ,a\n")).unwrap();
        assert_eq!(
            r.text(&r.rows[0], "text").unwrap_err().to_string(),
            format!("{}:2: field \"text\" is empty", r.path.display())
        );
    }

    #[test]
    fn labels_sort_and_refuse_the_unknown() {
        let r = Records::read(file("l.csv", "text,label\na,10\nb,9\nc,10\n")).unwrap();
        let labels = Labels::from_records(&r, "label").unwrap();
        assert_eq!(labels.names(), ["9", "10"]);
        assert_eq!(labels.id(&r, &r.rows[0], "label", "10").unwrap(), 1);
        assert_eq!(
            labels
                .id(&r, &r.rows[1], "label", "11")
                .unwrap_err()
                .to_string(),
            format!(
                "{}:3: field \"label\": label \"11\" is not among the 2 labels of the \
                 training data (9, 10)",
                r.path.display()
            )
        );
        let words = Labels::new(vec!["tragedy".into(), "comedy".into(), "comedy".into()]);
        assert_eq!(words.names(), ["comedy", "tragedy"]);
        let one = Records::read(file("one.csv", "text,label\na,x\nb,x\n")).unwrap();
        assert!(
            Labels::from_records(&one, "label")
                .unwrap_err()
                .to_string()
                .ends_with("field \"label\" holds 1 label (x); a classifier needs at least 2")
        );
    }
}
