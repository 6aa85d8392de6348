//! A model hub on 127.0.0.1 for the download tests: it serves folders in the hub's URL
//! layout, with the headers a hub client reads, and can fail the ways a real network
//! does.
//!
//! - `GET /api/models/{id}/revision/{rev}`: the repository's commit (`sha`) and file list
//!   (`siblings`), as JSON.
//! - `GET /{id}/resolve/{rev}/{file}`: the file, whole or from a `Range: bytes=A-[B]`
//!   (answered 206 with `Content-Range`), with `X-Repo-Commit` and an `ETag`.
//! - Anything else, or an unknown repository, revision or file: 404.
//!
//! Every response closes its connection. Each request is recorded, with its `Range` and
//! `Authorization` headers, for the tests to check what went over the network.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// One repository the server holds.
#[derive(Debug, Clone)]
pub struct HubRepo {
    /// `org/name`.
    pub id: String,
    /// The commit that `main` points at.
    pub commit: String,
    /// File name to contents.
    pub files: BTreeMap<String, Vec<u8>>,
    /// Files listed in `siblings` but answered 404 when asked for.
    pub withheld: Vec<String>,
}

impl HubRepo {
    /// The files of `dir` and its subfolders (named `sub/file`) under `id`, at a commit
    /// made from `id`.
    pub fn from_folder(id: &str, dir: &Path) -> Self {
        fn walk(dir: &Path, prefix: &str, files: &mut BTreeMap<String, Vec<u8>>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                let name = path.file_name().unwrap().to_str().unwrap();
                let name = format!("{prefix}{name}");
                if path.is_dir() {
                    walk(&path, &format!("{name}/"), files);
                } else {
                    files.insert(name, std::fs::read(&path).unwrap());
                }
            }
        }
        let mut files = BTreeMap::new();
        walk(dir, "", &mut files);
        Self {
            id: id.to_string(),
            commit: format!("{:040x}", hash(id.as_bytes()) as u128),
            files,
            withheld: Vec::new(),
        }
    }
}

/// A request as the server saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Served {
    /// The path asked for.
    pub path: String,
    /// The `Range` header.
    pub range: Option<String>,
    /// The `Authorization` header.
    pub authorization: Option<String>,
}

/// How the server fails.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// Every request must carry `Authorization: Bearer TOKEN`; others get 401.
    pub token: Option<String>,
    /// The first time this file's body is sent (not the one-byte probe of its size), the
    /// server sends this many bytes of it, then closes the connection and stops: the
    /// server dies mid-file.
    pub die_in: Option<(String, usize)>,
}

/// A running server; it stops when dropped.
#[derive(Debug)]
pub struct HubServer {
    endpoint: String,
    log: Arc<Mutex<Vec<Served>>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl HubServer {
    /// Starts serving `repos` on a free port of 127.0.0.1.
    pub fn start(repos: Vec<HubRepo>, faults: Faults) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let endpoint = format!("http://{}", listener.local_addr().unwrap());
        let log = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (log, stop) = (log.clone(), stop.clone());
            std::thread::spawn(move || {
                for stream in listener.incoming() {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let Ok(stream) = stream else { continue };
                    if serve(stream, &repos, &faults, &log) == Flow::Die {
                        stop.store(true, Ordering::SeqCst);
                        break;
                    }
                }
            })
        };
        Self {
            endpoint,
            log,
            stop,
            thread: Some(thread),
        }
    }

    /// `http://127.0.0.1:PORT`, for `HF_ENDPOINT`.
    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    /// The requests served so far, and forgets them.
    pub fn take_requests(&self) -> Vec<Served> {
        std::mem::take(&mut self.log.lock().unwrap())
    }

    /// Whether the server has died (see [`Faults::die_in`]).
    pub fn is_dead(&self) -> bool {
        self.stop.load(Ordering::SeqCst)
    }
}

impl Drop for HubServer {
    fn drop(&mut self) {
        if !self.stop.swap(true, Ordering::SeqCst) {
            // Wake the accept loop so that it sees the flag.
            let _ = TcpStream::connect(self.endpoint.trim_start_matches("http://"));
        }
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[derive(PartialEq, Eq)]
enum Flow {
    Go,
    Die,
}

fn serve(stream: TcpStream, repos: &[HubRepo], faults: &Faults, log: &Mutex<Vec<Served>>) -> Flow {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut line = String::new();
    if reader.read_line(&mut line).is_err() || line.is_empty() {
        return Flow::Go;
    }
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let mut headers = BTreeMap::new();
    loop {
        let mut h = String::new();
        if reader.read_line(&mut h).is_err() || h.trim().is_empty() {
            break;
        }
        if let Some((k, v)) = h.split_once(':') {
            headers.insert(k.trim().to_ascii_lowercase(), v.trim().to_string());
        }
    }
    let served = Served {
        path: path.clone(),
        range: headers.get("range").cloned(),
        authorization: headers.get("authorization").cloned(),
    };
    log.lock().unwrap().push(served.clone());
    let mut out = stream;
    if let Some(token) = &faults.token
        && served.authorization.as_deref() != Some(&format!("Bearer {token}"))
    {
        respond(&mut out, "401 Unauthorized", &[], b"unauthorized");
        return Flow::Go;
    }
    let path = path.replace("%2F", "/");
    if let Some(rest) = path.strip_prefix("/api/models/") {
        let Some((id, rev)) = rest.rsplit_once("/revision/") else {
            return not_found(&mut out);
        };
        let Some(repo) = repos.iter().find(|r| r.id == id && at(r, rev)) else {
            return not_found(&mut out);
        };
        let siblings: Vec<serde_json::Value> = repo
            .files
            .keys()
            .map(|f| serde_json::json!({ "rfilename": f }))
            .collect();
        let body = serde_json::json!({ "id": repo.id, "sha": repo.commit, "siblings": siblings });
        respond(
            &mut out,
            "200 OK",
            &[("Content-Type", "application/json".into())],
            body.to_string().as_bytes(),
        );
        return Flow::Go;
    }
    let Some((repo, rev, file)) = repos.iter().find_map(|r| {
        let rest = path.strip_prefix(&format!("/{}/resolve/", r.id))?;
        let (rev, file) = rest.split_once('/')?;
        Some((r, rev, file))
    }) else {
        return not_found(&mut out);
    };
    let Some(body) = repo.files.get(file).filter(|_| at(repo, rev)) else {
        return not_found(&mut out);
    };
    if repo.withheld.iter().any(|w| w == file) {
        return not_found(&mut out);
    }
    let n = body.len();
    let (start, end) = match served.range.as_deref().and_then(parse_range) {
        Some((a, b)) => (a.min(n), b.map_or(n, |b| (b + 1).min(n))),
        None => (0, n),
    };
    let common = vec![
        ("X-Repo-Commit", repo.commit.clone()),
        ("ETag", format!("\"{:016x}\"", hash(body))),
    ];
    let mut headers = common;
    let status = if served.range.is_some() {
        headers.push((
            "Content-Range",
            format!("bytes {start}-{}/{n}", end.max(1) - 1),
        ));
        "206 Partial Content"
    } else {
        "200 OK"
    };
    let part = &body[start..end];
    if let Some((die_file, after)) = &faults.die_in
        && die_file == file
        && part.len() > 1
    {
        headers.push(("Content-Length", part.len().to_string()));
        write_head(&mut out, status, &headers);
        let _ = out.write_all(&part[..(*after).min(part.len() - 1)]);
        let _ = out.flush();
        let _ = out.shutdown(Shutdown::Both);
        return Flow::Die;
    }
    respond(&mut out, status, &headers, part);
    Flow::Go
}

/// Whether `rev` names the repository's head: `main` or its commit.
fn at(repo: &HubRepo, rev: &str) -> bool {
    rev == "main" || rev == repo.commit
}

fn parse_range(range: &str) -> Option<(usize, Option<usize>)> {
    let (a, b) = range.strip_prefix("bytes=")?.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()))
}

fn not_found(out: &mut TcpStream) -> Flow {
    respond(
        out,
        "404 Not Found",
        &[("X-Error-Code", "EntryNotFound".into())],
        b"not found",
    );
    Flow::Go
}

fn write_head(out: &mut TcpStream, status: &str, headers: &[(&str, String)]) {
    let mut head = format!("HTTP/1.1 {status}\r\nConnection: close\r\n");
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let _ = out.write_all(head.as_bytes());
}

fn respond(out: &mut TcpStream, status: &str, headers: &[(&str, String)], body: &[u8]) {
    let mut all = headers.to_vec();
    all.push(("Content-Length", body.len().to_string()));
    write_head(out, status, &all);
    let _ = out.write_all(body);
    let _ = out.flush();
    let _ = out.shutdown(Shutdown::Write);
}

/// FNV-1a: a stable name for contents, enough for test ETags and commits.
fn hash(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
    })
}
