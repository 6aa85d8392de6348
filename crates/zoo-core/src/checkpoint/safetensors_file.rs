//! A safetensors file read tensor by tensor: the header is parsed and checked once, and
//! each tensor's bytes are read from the file (a positioned read) when it is loaded, into
//! memory of its own.
//!
//! burn-store's reader memory-maps the file instead. Every page of the map that loading
//! touches then stays resident in the process until the file is closed, beside the copy
//! each backend makes of it, so a loaded model briefly held its weights twice (2.1 to 2.3 ×
//! their bytes in `docs/precision.md`, rows 4a to 4e). Read this way the process holds one
//! copy; the file's pages stay in the kernel's page cache, shared and reclaimable, and out
//! of the process's resident memory.
//!
//! The format (a little-endian `u64` header length, a JSON header of `{name: {dtype,
//! shape, data_offsets}}` and an optional `__metadata__`, then the data) is that of the
//! safetensors specification.

use std::collections::BTreeMap;
use std::fs::File;
use std::path::Path;
use std::sync::Arc;

use burn::store::bridge;
use burn::store::burn_pack::Error as PackError;
use burn::tensor::{BoolStore, Bytes, DType, Shape, TensorData};

use super::{CheckpointError, PackTensor};

/// The largest header read: the safetensors specification's own bound (100 MB).
const MAX_HEADER: u64 = 100_000_000;

/// One tensor's entry in the header.
#[derive(serde::Deserialize)]
struct Entry {
    dtype: String,
    shape: Vec<usize>,
    data_offsets: [u64; 2],
}

/// The tensors of the safetensors file at `path`, by name, each read when it is loaded.
///
/// # Errors
/// [`CheckpointError::Io`] for a file that cannot be opened or read;
/// [`CheckpointError::Format`] for a header that is not the format's (too short, too
/// long, not JSON, an unknown dtype, offsets out of the file or disagreeing with the
/// shape), naming the tensor.
///
/// `narrow`: f16 or bf16 to read the file's f32 tensors in that type, converted a slice
/// at a time as they are read, so that the f32 values of a whole tensor are never held.
pub(super) fn read(
    path: &Path,
    narrow: Option<DType>,
) -> Result<BTreeMap<String, PackTensor>, CheckpointError> {
    let io = |e: std::io::Error| CheckpointError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let file = File::open(path).map_err(io)?;
    let file_len = file.metadata().map_err(io)?.len();
    parse(path, Source::File(Arc::new(file)), file_len, narrow)
}

/// The tensors of a safetensors file held in memory (fetched by a web page, say), by
/// name; `name` stands for the file in errors. Each tensor is copied out of `bytes` when it
/// is loaded.
///
/// # Errors
/// [`CheckpointError::Format`] for a header that is not the format's (its length, JSON, a dtype,
/// offsets that do not match a shape or leave gaps), naming `name`.
pub fn from_bytes(
    name: &Path,
    bytes: Arc<[u8]>,
) -> Result<BTreeMap<String, PackTensor>, CheckpointError> {
    let len = bytes.len() as u64;
    parse(name, Source::Bytes(bytes), len, None)
}

/// Where a safetensors file's bytes are.
#[derive(Clone)]
enum Source {
    File(Arc<File>),
    Bytes(Arc<[u8]>),
}

impl Source {
    /// Fills `buf` from byte `offset` on.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
        match self {
            Self::File(file) => read_at(file, buf, offset),
            Self::Bytes(bytes) => {
                let src = usize::try_from(offset)
                    .ok()
                    .and_then(|at| bytes.get(at..at.checked_add(buf.len())?))
                    .ok_or(std::io::ErrorKind::UnexpectedEof)?;
                buf.copy_from_slice(src);
                Ok(())
            }
        }
    }
}

/// The tensors of `source`, `file_len` bytes long; `path` names it in errors.
fn parse(
    path: &Path,
    source: Source,
    file_len: u64,
    narrow: Option<DType>,
) -> Result<BTreeMap<String, PackTensor>, CheckpointError> {
    let narrow = narrow.filter(|d| matches!(d, DType::F16 | DType::BF16));
    let io = |e: std::io::Error| CheckpointError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    };
    let format = |message: String| CheckpointError::Format {
        path: path.to_path_buf(),
        message,
    };
    let mut len = [0u8; 8];
    if file_len < 8 {
        return Err(format(format!(
            "{file_len} bytes, fewer than the 8 of a safetensors header's length"
        )));
    }
    source.read_at(&mut len, 0).map_err(io)?;
    let header_len = u64::from_le_bytes(len);
    if header_len > MAX_HEADER {
        return Err(format(format!(
            "its header claims {header_len} bytes, more than the format's bound of {MAX_HEADER}"
        )));
    }
    if header_len > file_len - 8 {
        return Err(format(format!(
            "its header claims {header_len} bytes, but the file has {} after the length",
            file_len - 8
        )));
    }
    let mut header = vec![0u8; header_len as usize];
    source.read_at(&mut header, 8).map_err(io)?;
    let data_start = 8 + header_len;
    let data_len = file_len - data_start;
    let mut json: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(&header)
        .map_err(|e| format(format!("its header is not a JSON object: {e}")))?;
    json.remove("__metadata__");
    let mut out = BTreeMap::new();
    // The format indexes the whole data, without holes or overlaps: checked as the
    // reference reader checks it, over the tensors in the order of their data.
    let mut spans: Vec<(u64, u64, String)> = Vec::with_capacity(json.len());
    for (name, value) in json {
        let entry: Entry =
            serde_json::from_value(value).map_err(|e| format(format!("tensor {name:?}: {e}")))?;
        let dtype = dtype(&entry.dtype)
            .ok_or_else(|| format(format!("tensor {name:?}: unknown dtype {:?}", entry.dtype)))?;
        let [begin, end] = entry.data_offsets;
        let bytes = entry
            .shape
            .iter()
            .try_fold(dtype.size() as u64, |n, &d| n.checked_mul(d as u64));
        let fits = end >= begin && end <= data_len;
        if !fits || bytes != Some(end - begin) {
            return Err(format(format!(
                "tensor {name:?} of shape {:?} in {}: its data_offsets [{begin}, {end}] {}",
                entry.shape,
                entry.dtype,
                if fits {
                    format!(
                        "hold {} bytes, not {}",
                        end - begin,
                        bytes.unwrap_or(u64::MAX)
                    )
                } else {
                    format!("are not within the {data_len} bytes of data")
                }
            )));
        }
        spans.push((begin, end, name.clone()));
        let (source, shape) = (source.clone(), entry.shape.clone());
        let offset = data_start + begin;
        let size = (end - begin) as usize;
        let tensor = match narrow {
            Some(half) if dtype == DType::F32 => bridge::deferred(
                name.clone(),
                half,
                Shape::from(entry.shape),
                None,
                move || {
                    let bytes = read_narrowed(&source, offset, size, half)
                        .map_err(|e| PackError::IoError(e.to_string()))?;
                    Ok(TensorData::from_bytes(bytes, shape.clone(), half))
                },
            ),
            _ => bridge::deferred(
                name.clone(),
                dtype,
                Shape::from(entry.shape),
                None,
                move || {
                    if dtype == DType::F32
                        && hand_over(|| RawF32 {
                            source: source.clone(),
                            offset,
                            shape: shape.clone(),
                        })
                    {
                        return Err(PackError::ValidationError(HANDED_OVER.into()));
                    }
                    let mut bytes = super::memory::buffer(size);
                    source
                        .read_at(&mut bytes, offset)
                        .map_err(|e| PackError::IoError(e.to_string()))?;
                    Ok(TensorData::from_bytes(bytes, shape.clone(), dtype))
                },
            ),
        };
        out.insert(name, tensor);
    }
    spans.sort();
    let mut covered = 0;
    for (begin, end, name) in spans {
        if begin != covered {
            return Err(format(format!(
                "tensor {name:?}'s data begins at byte {begin}, not at {covered} where the \
                 data before it ends"
            )));
        }
        covered = end;
    }
    if covered != data_len {
        return Err(format(format!(
            "its tensors cover {covered} bytes of data, but the file has {data_len}"
        )));
    }
    Ok(out)
}

/// An f32 tensor of a safetensors file, unread: its values are read a range at a time
/// ([`Self::read`]) by a caller that never holds them whole ([`read_raw`]).
pub(crate) struct RawF32 {
    source: Source,
    /// Of its first byte in the file.
    offset: u64,
    /// As stored.
    pub(crate) shape: Vec<usize>,
}

impl RawF32 {
    /// Fills `out` with the stored values from flat index `start` on.
    ///
    /// # Errors
    /// The file's, for a read that fails.
    pub(crate) fn read(&self, start: usize, out: &mut [f32]) -> std::io::Result<()> {
        let mut bytes = vec![0u8; out.len() * 4];
        self.source
            .read_at(&mut bytes, self.offset + start as u64 * 4)?;
        for (x, b) in out.iter_mut().zip(bytes.as_chunks::<4>().0) {
            *x = f32::from_le_bytes(*b);
        }
        Ok(())
    }
}

thread_local! {
    /// `Some` while [`read_raw`] asks; `Some(Some(_))` once a tensor handed itself over.
    static RAW: std::cell::RefCell<Option<Option<RawF32>>> = const { std::cell::RefCell::new(None) };
}

/// What a tensor handed over to [`read_raw`] gives in place of its data.
const HANDED_OVER: &str = "handed over unread";

/// Runs `draw` (which draws a tensor's data) with the f32 tensor of a safetensors file
/// that it reaches first handing itself over unread, in place of reading its values:
/// `Err(raw)` then, else `Ok` of what `draw` gave. Adapters between the tensor and the
/// caller (a rename, a transpose) are skipped with the data: the caller reads the values
/// in the stored layout. Tensors of other files and types are read as usual.
///
/// # Errors
/// What `draw` returns, when nothing was handed over.
pub(crate) fn read_raw(
    draw: impl FnOnce() -> Result<TensorData, PackError>,
) -> Result<Result<TensorData, RawF32>, PackError> {
    struct Reset;
    impl Drop for Reset {
        fn drop(&mut self) {
            RAW.with(|r| r.borrow_mut().take());
        }
    }
    let _reset = Reset;
    RAW.with(|r| *r.borrow_mut() = Some(None));
    let drawn = draw();
    match RAW.with(|r| r.borrow_mut().take()).flatten() {
        Some(raw) => Ok(Err(raw)),
        None => drawn.map(Ok),
    }
}

/// Whether a [`read_raw`] asks for a tensor; if so, `raw` is handed to it.
fn hand_over(raw: impl FnOnce() -> RawF32) -> bool {
    RAW.with(|r| {
        let mut slot = r.borrow_mut();
        match &*slot {
            Some(None) => {
                *slot = Some(Some(raw()));
                true
            }
            _ => false,
        }
    })
}

/// Values read at a time when narrowing: 1 MiB of f32.
const NARROW_CHUNK: usize = 1 << 18;

/// The `size` bytes of f32 values at `offset` as `half` (f16 or bf16) bytes, read and
/// converted `NARROW_CHUNK` values at a time.
fn read_narrowed(source: &Source, offset: u64, size: usize, half: DType) -> std::io::Result<Bytes> {
    let mut out = super::memory::buffer(size / 2);
    let mut chunk = vec![0u8; size.min(NARROW_CHUNK * 4)];
    let mut done = 0;
    while done < size {
        let n = (size - done).min(chunk.len());
        source.read_at(&mut chunk[..n], offset + done as u64)?;
        let values = TensorData::from_bytes_vec(chunk[..n].to_vec(), [n / 4], DType::F32);
        out[done / 2..(done + n) / 2].copy_from_slice(&values.convert_dtype(half).into_bytes());
        done += n;
    }
    Ok(out)
}

/// The Burn type of a safetensors dtype name, for the types a checkpoint holds.
fn dtype(name: &str) -> Option<DType> {
    Some(match name {
        "F64" => DType::F64,
        "F32" => DType::F32,
        "F16" => DType::F16,
        "BF16" => DType::BF16,
        "I64" => DType::I64,
        "I32" => DType::I32,
        "I16" => DType::I16,
        "I8" => DType::I8,
        "U64" => DType::U64,
        "U32" => DType::U32,
        "U8" => DType::U8,
        "BOOL" => DType::Bool(BoolStore::Native),
        _ => return None,
    })
}

#[cfg(unix)]
fn read_at(file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    std::os::unix::fs::FileExt::read_exact_at(file, buf, offset)
}

/// Elsewhere (wasm32, where no file opens), a seek and a read.
#[cfg(not(any(unix, windows)))]
fn read_at(mut file: &File, buf: &mut [u8], offset: u64) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    file.seek(SeekFrom::Start(offset))?;
    file.read_exact(buf)
}

#[cfg(windows)]
fn read_at(file: &File, mut buf: &mut [u8], mut offset: u64) -> std::io::Result<()> {
    while !buf.is_empty() {
        match std::os::windows::fs::FileExt::seek_read(file, buf, offset) {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => {
                buf = &mut buf[n..];
                offset += n as u64;
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use burn::store::ModuleStore;

    /// A safetensors file of `header` (a JSON object) and `data`.
    fn file(header: &serde_json::Value, data: &[u8]) -> Vec<u8> {
        let json = header.to_string().into_bytes();
        let mut out = (json.len() as u64).to_le_bytes().to_vec();
        out.extend(json);
        out.extend(data);
        out
    }

    fn written(name: &str, bytes: &[u8]) -> std::path::PathBuf {
        let dir =
            std::env::temp_dir().join(format!("zoo-safetensors-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("model.safetensors");
        std::fs::write(&path, bytes).unwrap();
        path
    }

    fn error(name: &str, bytes: &[u8]) -> String {
        let path = written(name, bytes);
        let Err(e) = read(&path, None) else {
            panic!("{name}: a malformed file is refused")
        };
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
        e.to_string()
    }

    /// f32 tensors read as f16 or bf16 a slice at a time hold the same bytes as the whole
    /// tensor read and then converted, across slices (300,001 values: one slice and a bit,
    /// an odd tail); an f16 tensor stays as it is, and without `narrow` f32 stays f32.
    #[test]
    fn f32_tensors_narrowed_as_read_equal_a_conversion_after_reading() {
        let n = NARROW_CHUNK + 37_857;
        let values: Vec<f32> = (0..n)
            .map(|i| ((i as f32) * 0.618_034).sin() * 3.0e4 / (1.0 + (i % 97) as f32))
            .collect();
        let wide: Vec<u8> = values.iter().flat_map(|v| v.to_le_bytes()).collect();
        let halves = TensorData::new(vec![1.5f32, -2.25], [2]).convert_dtype(DType::F16);
        let half_bytes = halves.as_bytes().to_vec();
        let header = serde_json::json!({
            "big": {"dtype": "F32", "shape": [n], "data_offsets": [0, 4 * n]},
            "small": {"dtype": "F16", "shape": [2], "data_offsets": [4 * n, 4 * n + 4]},
        });
        let mut data = wide.clone();
        data.extend(&half_bytes);
        let path = written("narrow", &file(&header, &data));
        for half in [DType::F16, DType::BF16] {
            let tensors = read(&path, Some(half)).unwrap();
            let big = bridge::to_data(&tensors["big"]).unwrap();
            assert_eq!(tensors["big"].dtype, half);
            assert_eq!(big.dtype(), half);
            let want = TensorData::new(values.clone(), [n]).convert_dtype(half);
            assert!(big.as_bytes() == want.as_bytes(), "{half:?}");
            let small = bridge::to_data(&tensors["small"]).unwrap();
            assert_eq!(
                (small.dtype(), small.as_bytes()),
                (DType::F16, &half_bytes[..])
            );
        }
        let plain = read(&path, None).unwrap();
        let big = bridge::to_data(&plain["big"]).unwrap();
        assert_eq!((big.dtype(), big.as_bytes()), (DType::F32, &wide[..]));
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    /// Three tensors of three types, with metadata, read back as burn-store's own
    /// (memory-mapping) reader reads them, value for value.
    #[test]
    fn tensors_read_as_burn_stores_reader_reads_them() {
        let half: Vec<u8> = [1.5f32, -2.0, 0.25]
            .iter()
            .flat_map(|v| burn::tensor::f16::from_f32(*v).to_le_bytes())
            .collect();
        let f32s: Vec<u8> = [1.0f32, 2.0, 3.0, 4.0]
            .iter()
            .flat_map(|v| v.to_le_bytes())
            .collect();
        let ids: Vec<u8> = [7i64, -1].iter().flat_map(|v| v.to_le_bytes()).collect();
        let mut data = f32s.clone();
        data.extend(&half);
        data.extend(&ids);
        let header = serde_json::json!({
            "__metadata__": {"format": "pt"},
            "w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
            "h": {"dtype": "F16", "shape": [3], "data_offsets": [16, 22]},
            "ids": {"dtype": "I64", "shape": [2], "data_offsets": [22, 38]},
        });
        let path = written("three", &file(&header, &data));
        let ours = read(&path, None).unwrap();
        let theirs = burn::store::SafetensorsStore::from_file(&path)
            .get_all_tensors()
            .unwrap()
            .clone();
        assert_eq!(
            ours.keys().collect::<Vec<_>>(),
            theirs.keys().collect::<Vec<_>>()
        );
        for (name, tensor) in &ours {
            let (a, b) = (
                bridge::to_data(tensor).unwrap(),
                bridge::to_data(&theirs[name]).unwrap(),
            );
            assert_eq!(a.shape(), b.shape(), "{name}");
            assert_eq!(a.dtype(), b.dtype(), "{name}");
            assert_eq!(a.as_bytes(), b.as_bytes(), "{name}");
        }
        let w = bridge::to_data(&ours["w"]).unwrap();
        assert_eq!(w.try_to_vec::<f32>().unwrap(), [1.0, 2.0, 3.0, 4.0]);
        let h = bridge::to_data(&ours["h"]).unwrap().convert::<f32>();
        assert_eq!(h.try_to_vec::<f32>().unwrap(), [1.5, -2.0, 0.25]);
        let ids = bridge::to_data(&ours["ids"]).unwrap();
        assert_eq!(ids.try_to_vec::<i64>().unwrap(), [7, -1]);
        std::fs::remove_dir_all(path.parent().unwrap()).unwrap();
    }

    /// Each way a header can be wrong is refused with what is wrong, by name and number.
    #[test]
    fn malformed_headers_are_refused_by_name() {
        assert!(error("short", &[1, 2, 3]).contains("3 bytes, fewer than the 8"));
        let mut long = 1_000u64.to_le_bytes().to_vec();
        long.extend(b"{}");
        assert!(
            error("long", &long).contains("claims 1000 bytes, but the file has 2"),
            "{}",
            error("long", &long)
        );
        let huge = u64::MAX.to_le_bytes();
        assert!(error("huge", &huge).contains("more than the format's bound of 100000000"));
        let mut not_json = 3u64.to_le_bytes().to_vec();
        not_json.extend(b"[1]");
        assert!(error("json", &not_json).contains("its header is not a JSON object"));
        let fp8 =
            serde_json::json!({"x": {"dtype": "F8_E4M3", "shape": [2], "data_offsets": [0, 2]}});
        assert!(
            error("fp8", &file(&fp8, &[0, 0])).contains("tensor \"x\": unknown dtype \"F8_E4M3\"")
        );
        let past =
            serde_json::json!({"x": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}});
        let message = error("past", &file(&past, &[0; 8]));
        assert!(
            message.contains("tensor \"x\" of shape [4] in F32: its data_offsets [0, 16] are not within the 8 bytes of data"),
            "{message}"
        );
        let wrong =
            serde_json::json!({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}});
        let message = error("wrong", &file(&wrong, &[0; 8]));
        assert!(message.contains("hold 8 bytes, not 12"), "{message}");
        let overflow = serde_json::json!({"x": {"dtype": "F32", "shape": [u64::MAX, 4], "data_offsets": [0, 8]}});
        let message = error("overflow", &file(&overflow, &[0; 8]));
        assert!(
            message.contains("hold 8 bytes, not 18446744073709551615"),
            "{message}"
        );
        let gap = serde_json::json!({
            "x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
            "y": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]},
        });
        let message = error("gap", &file(&gap, &[0; 12]));
        assert!(
            message.contains("tensor \"y\"'s data begins at byte 8, not at 4"),
            "{message}"
        );
        let tail = serde_json::json!({"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}});
        let message = error("tail", &file(&tail, &[0; 12]));
        assert!(
            message.contains("cover 4 bytes of data, but the file has 12"),
            "{message}"
        );
        let missing = serde_json::json!({"x": {"dtype": "F32", "shape": [2]}});
        let message = error("missing", &file(&missing, &[0; 8]));
        assert!(
            message.contains("tensor \"x\": missing field `data_offsets`"),
            "{message}"
        );
    }
}
