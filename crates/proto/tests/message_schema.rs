//! The shape of every postcard-encoded message and record type, locked.
//!
//! postcard carries no field names or tags: a struct's bytes are its fields in order, an
//! enum's are the variant's index then its fields. So a message type may change in one way
//! only without breaking peers of the previous version: an enum may gain variants at its
//! end. Anything else (a field added, removed, retyped or moved; a variant inserted,
//! reordered or changed) makes the previous version's bytes decode wrongly or not at all,
//! and needs a new frame version whose decoder keeps the old shapes (docs/PROTOCOL.md,
//! "Message versions").
//!
//! `test-vectors/message-schema.txt` records every type's definition as the source gives
//! it (comments dropped, whitespace collapsed). This test fails when the source is not
//! an append-only extension of it, and, separately, when a compatible change has not been
//! recorded. Record one with `MAAT_BLESS=1 cargo test -p maat-proto --test message_schema`;
//! an incompatible one (with a new frame version) only with `MAAT_BLESS=incompatible`.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Where the encoded types live (message bodies, and what they carry).
const SOURCES: &[&str] = &[
    "crates/proto/src/msg/mod.rs",
    "crates/proto/src/msg/mds.rs",
    "crates/proto/src/msg/osd.rs",
    "crates/proto/src/msg/kds.rs",
    "crates/proto/src/protection.rs",
    "crates/proto/src/file_crypt.rs",
];

/// Files of `crates/proto/src` that derive `Serialize` but hold no message type, and why.
const NOT_MESSAGES: &[(&str, &str)] = &[(
    "ids.rs",
    "the id newtypes, each a transparent u64 made by one macro",
)];

#[derive(Debug, Clone, PartialEq)]
enum Shape {
    /// A struct's whole definition.
    Struct(String),
    /// An enum's variants in order, each its whole definition.
    Enum(Vec<String>),
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

fn schema_path() -> PathBuf {
    root().join("test-vectors/message-schema.txt")
}

fn collapse(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// Source lines without comments (whole-line and trailing) and blank lines, with an
/// attribute that rustfmt wrapped over several lines joined into one.
fn code_lines(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut open_attribute = false;
    for l in text.lines() {
        let l = l.split(" //").next().unwrap_or(l).trim_end();
        let t = l.trim_start();
        if t.is_empty() || t.starts_with("//") {
            continue;
        }
        match out.last_mut() {
            Some(last) if open_attribute => {
                last.push(' ');
                last.push_str(t);
            }
            _ => out.push(l.to_string()),
        }
        let last = out.last().map(String::as_str).unwrap_or_default();
        open_attribute = last.starts_with("#[") && !last.ends_with(']');
    }
    out
}

/// The types of `file` that derive `Serialize`: name → shape.
fn types_of(file: &Path) -> BTreeMap<String, Shape> {
    let text = std::fs::read_to_string(file).unwrap();
    // Test modules (at the end of a file) define no wire types.
    let text = text.split("#[cfg(test)]\nmod ").next().unwrap();
    let lines = code_lines(text);
    let mut out = BTreeMap::new();
    let mut i = 0;
    while i < lines.len() {
        let line = lines[i].as_str();
        if !(line.starts_with("#[derive(") && line.contains("Serialize")) {
            i += 1;
            continue;
        }
        // Attributes up to the item (serde attributes change the encoding: kept).
        let mut attrs = Vec::new();
        i += 1;
        while lines[i].starts_with("#[") {
            if !lines[i].starts_with("#[derive(") && lines[i] != "#[non_exhaustive]" {
                attrs.push(lines[i].as_str());
            }
            i += 1;
        }
        let header = lines[i].as_str();
        let (kind, rest) = if let Some(r) = header.strip_prefix("pub struct ") {
            ("struct", r)
        } else if let Some(r) = header.strip_prefix("pub enum ") {
            ("enum", r)
        } else {
            panic!("{}: a derive(Serialize) on `{header}`", file.display());
        };
        let name: String = rest
            .chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect();
        // One-line items (`pub struct X(u64);`) end on their line, braced ones at `}`,
        // tuple structs spread over lines at `);`.
        let mut body: Vec<&str> = Vec::new();
        if !header.ends_with(';') && !header.ends_with('}') {
            let end = if header.ends_with('(') { ");" } else { "}" };
            i += 1;
            while lines[i] != end {
                body.push(lines[i].as_str());
                i += 1;
            }
            if end == ");" {
                body.push(end);
            }
        }
        let shape = match kind {
            "struct" => Shape::Struct(collapse(&format!(
                "{} {header} {} }}",
                attrs.join(" "),
                body.join(" ")
            ))),
            _ => {
                // A variant starts at the enum's indentation with a name or an attribute.
                let mut variants: Vec<Vec<&str>> = Vec::new();
                let mut pending_attrs: Vec<&str> = Vec::new();
                for l in body {
                    let at_top = l.starts_with("    ") && !l.starts_with("     ");
                    let t = l.trim_start();
                    if at_top && t.starts_with("#[") {
                        pending_attrs.push(l);
                    } else if at_top && t.starts_with(|c: char| c.is_ascii_uppercase()) {
                        let mut v = std::mem::take(&mut pending_attrs);
                        v.push(l);
                        variants.push(v);
                    } else if let Some(v) = variants.last_mut() {
                        v.push(l);
                    }
                }
                let mut shapes = vec![collapse(&format!("{} {header}", attrs.join(" ")))];
                shapes.extend(variants.iter().map(|v| collapse(&v.join(" "))));
                Shape::Enum(shapes)
            }
        };
        assert!(
            out.insert(name.clone(), shape).is_none(),
            "{name} defined twice"
        );
        i += 1;
    }
    out
}

fn current() -> BTreeMap<String, Shape> {
    let mut all = BTreeMap::new();
    for source in SOURCES {
        for (name, shape) in types_of(&root().join(source)) {
            assert!(all.insert(name.clone(), shape).is_none(), "{name} twice");
        }
    }
    all
}

fn render(types: &BTreeMap<String, Shape>) -> String {
    let mut out = String::new();
    for (name, shape) in types {
        match shape {
            Shape::Struct(s) => out.push_str(&format!("struct {name}\n  {s}\n")),
            Shape::Enum(v) => {
                out.push_str(&format!("enum {name}\n"));
                for (i, s) in v.iter().enumerate() {
                    out.push_str(&format!("  {i} {s}\n"));
                }
            }
        }
    }
    out
}

fn parse(text: &str) -> BTreeMap<String, Shape> {
    let mut out = BTreeMap::new();
    let mut lines = text.lines().peekable();
    while let Some(head) = lines.next() {
        let (kind, name) = head.split_once(' ').unwrap();
        let mut body = Vec::new();
        while lines.peek().is_some_and(|l| l.starts_with("  ")) {
            body.push(lines.next().unwrap().trim_start().to_string());
        }
        let shape = match kind {
            "struct" => Shape::Struct(body.concat()),
            "enum" => Shape::Enum(
                body.iter()
                    .map(|l| l.split_once(' ').unwrap().1.to_string())
                    .collect(),
            ),
            other => panic!("message-schema.txt: unknown kind {other}"),
        };
        out.insert(name.to_string(), shape);
    }
    out
}

/// Why `now` cannot decode what `before` encoded, type by type (empty: it can).
fn incompatibilities(
    before: &BTreeMap<String, Shape>,
    now: &BTreeMap<String, Shape>,
) -> Vec<String> {
    let mut out = Vec::new();
    for (name, old) in before {
        match (old, now.get(name)) {
            (_, None) => out.push(format!("{name}: removed or renamed")),
            (Shape::Struct(a), Some(Shape::Struct(b))) if a != b => out.push(format!(
                "{name}: struct changed\n    was: {a}\n    now: {b}"
            )),
            (Shape::Enum(a), Some(Shape::Enum(b))) => {
                if b.len() < a.len() {
                    out.push(format!("{name}: variants removed"));
                }
                for (i, (x, y)) in a.iter().zip(b).enumerate() {
                    if x != y {
                        out.push(format!(
                            "{name}: {} changed (append new variants at the end instead)\n    was: {x}\n    now: {y}",
                            if i == 0 { "the enum's header".to_string() } else { format!("variant {i}") }
                        ));
                    }
                }
            }
            (Shape::Struct(_), Some(Shape::Struct(_))) => {}
            _ => out.push(format!("{name}: changed between struct and enum")),
        }
    }
    out
}

#[test]
fn message_types_change_only_by_appended_variants() {
    let now = current();
    let committed =
        std::fs::read_to_string(schema_path()).expect("test-vectors/message-schema.txt");
    let before = parse(&committed);
    let broken = incompatibilities(&before, &now);
    match std::env::var("MAAT_BLESS").as_deref() {
        Ok("incompatible") => return std::fs::write(schema_path(), render(&now)).unwrap(),
        Ok(_) if broken.is_empty() => return std::fs::write(schema_path(), render(&now)).unwrap(),
        Ok(_) => panic!(
            "not recording an incompatible change (MAAT_BLESS=incompatible does, with a new \
             frame version):\n{}",
            broken.join("\n")
        ),
        Err(_) => {}
    }
    assert!(
        broken.is_empty(),
        "message types changed so that peers of the previous version can no longer decode \
         them; keep the old shape (append a variant instead), or bump the frame version with \
         a decoder for the old shapes (docs/PROTOCOL.md, \"Message versions\"), then bless:\n{}",
        broken.join("\n")
    );
    assert!(
        render(&now) == committed,
        "a compatible change to the message types is not recorded: run \
         MAAT_BLESS=1 cargo test -p maat-proto --test message_schema"
    );
}

/// The lock sees the types it must: every file of `maat-proto` that derives `Serialize`
/// is read (or named as holding no message), and the request and answer enums of every
/// daemon are found.
#[test]
fn the_schema_covers_every_message_enum() {
    let src = root().join("crates/proto/src");
    let mut files = vec![src.clone()];
    while let Some(path) = files.pop() {
        if path.is_dir() {
            files.extend(std::fs::read_dir(&path).unwrap().map(|e| e.unwrap().path()));
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let relative = path
            .strip_prefix(root())
            .unwrap()
            .to_string_lossy()
            .to_string();
        let exempt = NOT_MESSAGES.iter().any(|(name, _)| {
            path.strip_prefix(&src)
                .is_ok_and(|p| p.to_string_lossy() == *name)
        });
        if text.contains("Serialize,") || text.contains("Serialize)") {
            assert!(
                exempt || SOURCES.contains(&relative.as_str()),
                "{relative} derives Serialize: add it to SOURCES (or to NOT_MESSAGES, saying why)"
            );
        }
    }
    let now = current();
    for name in [
        "MdsRequest",
        "MdsResponse",
        "MdsPlainRequest",
        "MdsPlainResponse",
        "OsdCommand",
        "OsdResponse",
        "OsdPlainRequest",
        "OsdPlainResponse",
        "KdsRequest",
        "KdsResponse",
        "WireError",
        "ErrorCode",
        "FileStat",
        "Protection",
    ] {
        assert!(now.contains_key(name), "{name} is not in the schema");
    }
    // Variants are split where they are: MdsRequest has many, each on its own.
    match &now["MdsRequest"] {
        Shape::Enum(v) => assert!(v.len() > 30, "{} variants", v.len()),
        Shape::Struct(_) => panic!("MdsRequest is an enum"),
    }
}

/// A field added in the middle of a struct, and a variant inserted before the last, are
/// both caught; a variant appended is not.
#[test]
fn the_check_tells_compatible_from_incompatible() {
    let before = parse(
        "struct A\n  pub struct A { x: u8, }\nenum E\n  0 pub enum E {\n  1 One,\n  2 Two(u8),\n",
    );
    let field = parse("struct A\n  pub struct A { x: u8, y: u8, }\nenum E\n  0 pub enum E {\n  1 One,\n  2 Two(u8),\n");
    let inserted = parse("struct A\n  pub struct A { x: u8, }\nenum E\n  0 pub enum E {\n  1 One,\n  2 Half,\n  3 Two(u8),\n");
    let appended = parse("struct A\n  pub struct A { x: u8, }\nenum E\n  0 pub enum E {\n  1 One,\n  2 Two(u8),\n  3 Three,\n");
    assert_eq!(incompatibilities(&before, &field).len(), 1);
    assert_eq!(incompatibilities(&before, &inserted).len(), 1);
    assert!(incompatibilities(&before, &appended).is_empty());
}
