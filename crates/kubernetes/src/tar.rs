//! The tar streams that carry trees between Warden and a pod (a pod shares no file system with
//! Warden): a writer of POSIX (pax) archives — directories, regular files, symbolic links; a
//! PAX header for names or link targets past ustar's fields — padded to whole 10 KiB records so
//! GNU `tar -x` ends without waiting for the end of its input, and a reader of what GNU
//! `tar --format=posix -c` writes back.

use std::io::{Read, Write};

const BLOCK: usize = 512;
const RECORD: u64 = 10240;

/// What a tar entry is.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Kind {
    Directory,
    File { size: u64 },
    Symlink { target: String },
}

/// One entry as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Entry {
    /// The name as archived (relative, no leading `./`, no trailing `/`).
    pub(crate) name: String,
    pub(crate) mode: u32,
    pub(crate) kind: Kind,
}

/// Writes an archive.
pub(crate) struct Writer<W: Write> {
    out: W,
    written: u64,
}

impl<W: Write> Writer<W> {
    pub(crate) fn new(out: W) -> Self {
        Writer { out, written: 0 }
    }

    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.out.write_all(bytes)?;
        self.written += bytes.len() as u64;
        Ok(())
    }

    fn pad(&mut self) -> std::io::Result<()> {
        let rest = (self.written % BLOCK as u64) as usize;
        if rest != 0 {
            self.put(&vec![0u8; BLOCK - rest])?;
        }
        Ok(())
    }

    fn header(
        &mut self,
        name: &str,
        mode: u32,
        mtime: u64,
        size: u64,
        typeflag: u8,
        link: &str,
    ) -> std::io::Result<()> {
        let long = |s: &str| s.len() > 99 || !s.is_ascii();
        if long(name) || long(link) {
            let mut records = Vec::new();
            if long(name) {
                records.extend(pax_record("path", name));
            }
            if long(link) {
                records.extend(pax_record("linkpath", link));
            }
            let block = ustar_header("././@PaxHeader", 0o644, 0, records.len() as u64, b'x', "");
            self.put(&block)?;
            self.put(&records)?;
            self.pad()?;
        }
        fn short(s: &str) -> &str {
            if s.len() > 99 || !s.is_ascii() {
                ""
            } else {
                s
            }
        }
        let block = ustar_header(short(name), mode, mtime, size, typeflag, short(link));
        self.put(&block)
    }

    pub(crate) fn directory(&mut self, name: &str, mode: u32, mtime: u64) -> std::io::Result<()> {
        self.header(&format!("{name}/"), mode, mtime, 0, b'5', "")
    }

    pub(crate) fn symlink(&mut self, name: &str, target: &str, mtime: u64) -> std::io::Result<()> {
        self.header(name, 0o777, mtime, 0, b'2', target)
    }

    /// A regular file of exactly `size` bytes read from `data`.
    pub(crate) fn file(
        &mut self,
        name: &str,
        mode: u32,
        mtime: u64,
        size: u64,
        data: &mut dyn Read,
    ) -> std::io::Result<()> {
        self.header(name, mode, mtime, size, b'0', "")?;
        let copied = std::io::copy(&mut data.take(size), &mut self.out)?;
        self.written += copied;
        if copied != size {
            return Err(std::io::Error::new(
                std::io::ErrorKind::UnexpectedEof,
                format!("{name} changed size while it was archived"),
            ));
        }
        self.pad()
    }

    /// The end: two zero blocks, then zeros to a whole record.
    pub(crate) fn finish(mut self) -> std::io::Result<W> {
        self.put(&[0u8; 2 * BLOCK])?;
        let rest = self.written % RECORD;
        if rest != 0 {
            self.put(&vec![0u8; (RECORD - rest) as usize])?;
        }
        self.out.flush()?;
        Ok(self.out)
    }
}

fn pax_record(key: &str, value: &str) -> Vec<u8> {
    // "<length> <key>=<value>\n", the length counting itself.
    let body = format!(" {key}={value}\n");
    let mut length = body.len() + 1;
    while format!("{length}{body}").len() != length {
        length += 1;
    }
    format!("{length}{body}").into_bytes()
}

fn ustar_header(
    name: &str,
    mode: u32,
    mtime: u64,
    size: u64,
    typeflag: u8,
    link: &str,
) -> [u8; BLOCK] {
    let mut block = [0u8; BLOCK];
    let field = |block: &mut [u8; BLOCK], at: usize, len: usize, value: &[u8]| {
        let n = value.len().min(len);
        block[at..at + n].copy_from_slice(&value[..n]);
    };
    let octal =
        |value: u64, len: usize| format!("{value:0width$o}\0", width = len - 1).into_bytes();
    field(&mut block, 0, 100, name.as_bytes());
    field(&mut block, 100, 8, &octal(u64::from(mode & 0o7777), 8));
    field(&mut block, 108, 8, &octal(1000, 8));
    field(&mut block, 116, 8, &octal(1000, 8));
    field(&mut block, 124, 12, &octal(size.min(0o77777777777), 12));
    field(&mut block, 136, 12, &octal(mtime.min(0o77777777777), 12));
    block[156] = typeflag;
    field(&mut block, 157, 100, link.as_bytes());
    field(&mut block, 257, 6, b"ustar\0");
    field(&mut block, 263, 2, b"00");
    field(&mut block, 148, 8, b"        ");
    let sum: u32 = block.iter().map(|&b| u32::from(b)).sum();
    field(&mut block, 148, 8, format!("{sum:06o}\0 ").as_bytes());
    block
}

/// Reads an archive, handing each entry (and, for files, its data) to `each`.
pub(crate) fn read(
    input: &mut dyn Read,
    each: &mut dyn FnMut(&Entry, &mut dyn Read) -> std::io::Result<()>,
) -> std::io::Result<()> {
    let invalid = |what: String| std::io::Error::new(std::io::ErrorKind::InvalidData, what);
    let mut pax_path: Option<String> = None;
    let mut pax_link: Option<String> = None;
    let mut gnu_long: Option<String> = None;
    let mut gnu_link: Option<String> = None;
    loop {
        let mut block = [0u8; BLOCK];
        if !read_block(input, &mut block)? || block.iter().all(|&b| b == 0) {
            return Ok(());
        }
        let text = |at: usize, len: usize| {
            let raw = &block[at..at + len];
            let end = raw.iter().position(|&b| b == 0).unwrap_or(len);
            String::from_utf8_lossy(&raw[..end]).into_owned()
        };
        let number = |at: usize, len: usize| -> std::io::Result<u64> {
            let value = text(at, len);
            let value = value.trim_matches(|c: char| c == ' ' || c == '\0');
            if value.is_empty() {
                return Ok(0);
            }
            u64::from_str_radix(value, 8).map_err(|_| invalid(format!("bad tar number {value:?}")))
        };
        let size = number(124, 12)?;
        let mode = number(100, 8)? as u32;
        let typeflag = block[156];
        let mut name = text(0, 100);
        let prefix = text(345, 155);
        if &block[257..262] == b"ustar" && !prefix.is_empty() {
            name = format!("{prefix}/{name}");
        }
        let mut link = text(157, 100);
        let padded = size.div_ceil(BLOCK as u64) * BLOCK as u64;
        match typeflag {
            b'x' | b'L' | b'K' => {
                if size > 1 << 20 {
                    return Err(invalid("an extended tar header is too long".into()));
                }
                let mut data = vec![0u8; padded as usize];
                input.read_exact(&mut data)?;
                data.truncate(size as usize);
                match typeflag {
                    b'x' => {
                        for (key, value) in pax_records(&data) {
                            match key.as_str() {
                                "path" => pax_path = Some(value),
                                "linkpath" => pax_link = Some(value),
                                _ => {}
                            }
                        }
                    }
                    b'L' => gnu_long = Some(trim_nul(&data)),
                    _ => gnu_link = Some(trim_nul(&data)),
                }
                continue;
            }
            b'g' => {
                std::io::copy(&mut input.take(padded), &mut std::io::sink())?;
                continue;
            }
            _ => {}
        }
        if let Some(long) = pax_path.take().or(gnu_long.take()) {
            name = long;
        }
        if let Some(long) = pax_link.take().or(gnu_link.take()) {
            link = long;
        }
        let name = name
            .trim_start_matches("./")
            .trim_end_matches('/')
            .to_string();
        let kind = match typeflag {
            b'5' => Kind::Directory,
            b'2' => Kind::Symlink { target: link },
            b'0' | b'\0' | b'7' => Kind::File { size },
            other => {
                return Err(invalid(format!(
                    "tar entry {name} has a type Warden does not take ({:?})",
                    char::from(other)
                )))
            }
        };
        let entry = Entry { name, mode, kind };
        let mut data = (&mut *input).take(size);
        each(&entry, &mut data)?;
        std::io::copy(&mut data, &mut std::io::sink())?;
        std::io::copy(&mut input.take(padded - size), &mut std::io::sink())?;
    }
}

fn trim_nul(data: &[u8]) -> String {
    let end = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    String::from_utf8_lossy(&data[..end]).into_owned()
}

fn pax_records(data: &[u8]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut rest = data;
    while let Some(space) = rest.iter().position(|&b| b == b' ') {
        let Some(length) = std::str::from_utf8(&rest[..space])
            .ok()
            .and_then(|n| n.parse::<usize>().ok())
        else {
            break;
        };
        if length <= space + 1 || length > rest.len() {
            break;
        }
        let record = &rest[space + 1..length - 1];
        if let Some(eq) = record.iter().position(|&b| b == b'=') {
            out.push((
                String::from_utf8_lossy(&record[..eq]).into_owned(),
                String::from_utf8_lossy(&record[eq + 1..]).into_owned(),
            ));
        }
        rest = &rest[length..];
    }
    out
}

/// Fills a block; `false` at a clean end of input.
fn read_block(input: &mut dyn Read, block: &mut [u8; BLOCK]) -> std::io::Result<bool> {
    let mut filled = 0;
    while filled < BLOCK {
        match input.read(&mut block[filled..]) {
            Ok(0) if filled == 0 => return Ok(false),
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => filled += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn archives_round_trip_with_long_names() {
        let long = format!("{}/file.rs", "deep/".repeat(30));
        let mut writer = Writer::new(Vec::new());
        writer.directory("src", 0o755, 1).unwrap();
        writer
            .file("src/lib.rs", 0o644, 2, 5, &mut &b"hello"[..])
            .unwrap();
        writer.file(&long, 0o444, 3, 0, &mut &b""[..]).unwrap();
        writer.symlink("link", &"t".repeat(150), 4).unwrap();
        let archive = writer.finish().unwrap();
        assert_eq!(archive.len() % RECORD as usize, 0);
        let mut seen = Vec::new();
        read(&mut &archive[..], &mut |entry, data| {
            let mut content = String::new();
            data.read_to_string(&mut content)?;
            seen.push((entry.clone(), content));
            Ok(())
        })
        .unwrap();
        assert_eq!(seen.len(), 4);
        assert_eq!(seen[0].0.kind, Kind::Directory);
        assert_eq!(seen[0].0.name, "src");
        assert_eq!(seen[1].1, "hello");
        assert_eq!(seen[1].0.mode, 0o644);
        assert_eq!(seen[2].0.name, long);
        assert_eq!(
            seen[3].0.kind,
            Kind::Symlink {
                target: "t".repeat(150)
            }
        );
    }

    #[test]
    fn pax_records_count_their_own_length() {
        let record = pax_record("path", &"a".repeat(95));
        let text = String::from_utf8(record.clone()).unwrap();
        let length: usize = text.split(' ').next().unwrap().parse().unwrap();
        assert_eq!(length, record.len());
        assert_eq!(
            pax_records(&record),
            vec![("path".to_string(), "a".repeat(95))]
        );
    }
}
