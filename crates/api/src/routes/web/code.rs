//! Code as code: the console's views of source text — cited lines with their numbers, a
//! proposal's diff split per file (folded with `<details>`) with line numbers, a
//! Markdown code block — and the small highlighter they share.
//!
//! The highlighter is a hand-written lexer over a table of languages (comments, strings,
//! numbers, keywords, literals, type-like and macro-like names), not `syntect`: measured on
//! a 30 KB Rust file, `syntect` (default syntaxes, `fancy-regex`, classed HTML) took 73 ms
//! in a release build and wrote 330 KB of HTML, against the console's 20 ms render goal for
//! a whole task page and 100 KB page budget; it would also add about 3 MB and 30 crates to
//! the binary. A diff shows fragments of files anyway, so a grammar's full-file state buys
//! little; this lexer carries only block comments and long strings from line to line, and
//! starts afresh at each hunk.
//!
//! Every piece of text goes through maud's escaping; line numbers are CSS generated content
//! (`data-n`), so selecting and copying code copies the code alone. The markup is as small as
//! it can be (a `div` per line, an `<i class="k">` per token, one gutter: the new side's number,
//! or the old side's on a removed line): a long diff is most of a page, and a phone downloads
//! it.

use maud::{html, Markup};

/// What a piece of a line is, as the class of its `<i>` (`k`, …): one letter, since a long
/// diff has thousands of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Class {
    Plain,
    Keyword,
    String,
    Comment,
    Number,
    /// `true`, `null`, `None`, …
    Literal,
    /// A capitalised name: a type, most of the time.
    Type,
    /// A Rust macro call or attribute, a decorator, a shell variable.
    Meta,
}

impl Class {
    fn css(self) -> Option<&'static str> {
        match self {
            Class::Plain => None,
            Class::Keyword => Some("k"),
            Class::String => Some("s"),
            Class::Comment => Some("c"),
            Class::Number => Some("n"),
            Class::Literal => Some("l"),
            Class::Type => Some("t"),
            Class::Meta => Some("m"),
        }
    }
}

/// How one language looks to the lexer.
#[derive(Debug)]
pub(super) struct Syntax {
    line_comments: &'static [&'static str],
    block_comment: Option<(&'static str, &'static str)>,
    /// Characters that open a string closed by the same character on the same line.
    quotes: &'static [char],
    /// Delimiters of strings that may span lines (`"""`, a JavaScript template literal).
    long_strings: &'static [&'static str],
    /// `'x'` is a character literal, a lone `'` something else (a Rust lifetime).
    char_literals: bool,
    keywords: &'static [&'static str],
    literals: &'static [&'static str],
    case_insensitive: bool,
    /// `name!(…)` and `#[…]` (Rust).
    rust_meta: bool,
    /// `@decorator` (Python, Java, TypeScript).
    decorators: bool,
    /// `$name`, `${…}` (shell).
    variables: bool,
}

const BASE: Syntax = Syntax {
    line_comments: &[],
    block_comment: None,
    quotes: &[],
    long_strings: &[],
    char_literals: false,
    keywords: &[],
    literals: &[],
    case_insensitive: false,
    rust_meta: false,
    decorators: false,
    variables: false,
};

static RUST: Syntax = Syntax {
    line_comments: &["//"],
    block_comment: Some(("/*", "*/")),
    long_strings: &["\""],
    char_literals: true,
    keywords: &[
        "as", "async", "await", "break", "const", "continue", "crate", "dyn", "else", "enum",
        "extern", "fn", "for", "if", "impl", "in", "let", "loop", "match", "mod", "move", "mut",
        "pub", "ref", "return", "self", "Self", "static", "struct", "super", "trait", "type",
        "unsafe", "use", "where", "while", "yield",
    ],
    literals: &["true", "false", "None", "Some", "Ok", "Err"],
    rust_meta: true,
    ..BASE
};

static C_LIKE: Syntax = Syntax {
    line_comments: &["//"],
    block_comment: Some(("/*", "*/")),
    quotes: &['"'],
    char_literals: true,
    keywords: &[
        "abstract",
        "auto",
        "break",
        "case",
        "catch",
        "class",
        "const",
        "continue",
        "default",
        "delete",
        "do",
        "else",
        "enum",
        "explicit",
        "extends",
        "extern",
        "final",
        "finally",
        "for",
        "friend",
        "goto",
        "if",
        "implements",
        "import",
        "include",
        "inline",
        "instanceof",
        "interface",
        "namespace",
        "new",
        "operator",
        "override",
        "package",
        "private",
        "protected",
        "public",
        "register",
        "return",
        "sizeof",
        "static",
        "struct",
        "super",
        "switch",
        "synchronized",
        "template",
        "this",
        "throw",
        "throws",
        "try",
        "typedef",
        "typename",
        "union",
        "using",
        "virtual",
        "void",
        "volatile",
        "while",
        "int",
        "char",
        "long",
        "short",
        "unsigned",
        "signed",
        "float",
        "double",
        "bool",
        "boolean",
        "byte",
        "var",
        "val",
        "fun",
        "func",
        "let",
        "guard",
        "where",
    ],
    literals: &["true", "false", "null", "nullptr", "NULL", "nil"],
    decorators: true,
    ..BASE
};

static GO: Syntax = Syntax {
    line_comments: &["//"],
    block_comment: Some(("/*", "*/")),
    quotes: &['"'],
    long_strings: &["`"],
    char_literals: true,
    keywords: &[
        "break",
        "case",
        "chan",
        "const",
        "continue",
        "default",
        "defer",
        "else",
        "fallthrough",
        "for",
        "func",
        "go",
        "goto",
        "if",
        "import",
        "interface",
        "map",
        "package",
        "range",
        "return",
        "select",
        "struct",
        "switch",
        "type",
        "var",
    ],
    literals: &["true", "false", "nil", "iota"],
    ..BASE
};

static JAVASCRIPT: Syntax = Syntax {
    line_comments: &["//"],
    block_comment: Some(("/*", "*/")),
    quotes: &['"', '\''],
    long_strings: &["`"],
    keywords: &[
        "as",
        "async",
        "await",
        "break",
        "case",
        "catch",
        "class",
        "const",
        "continue",
        "debugger",
        "declare",
        "default",
        "delete",
        "do",
        "else",
        "enum",
        "export",
        "extends",
        "finally",
        "for",
        "from",
        "function",
        "get",
        "if",
        "implements",
        "import",
        "in",
        "instanceof",
        "interface",
        "let",
        "new",
        "of",
        "private",
        "protected",
        "public",
        "readonly",
        "return",
        "set",
        "static",
        "super",
        "switch",
        "this",
        "throw",
        "try",
        "type",
        "typeof",
        "var",
        "void",
        "while",
        "with",
        "yield",
    ],
    literals: &["true", "false", "null", "undefined", "NaN"],
    decorators: true,
    ..BASE
};

static PYTHON: Syntax = Syntax {
    line_comments: &["#"],
    quotes: &['"', '\''],
    long_strings: &["\"\"\"", "'''"],
    keywords: &[
        "and", "as", "assert", "async", "await", "break", "class", "continue", "def", "del",
        "elif", "else", "except", "finally", "for", "from", "global", "if", "import", "in", "is",
        "lambda", "match", "case", "nonlocal", "not", "or", "pass", "raise", "return", "try",
        "while", "with", "yield", "self",
    ],
    literals: &["True", "False", "None"],
    decorators: true,
    ..BASE
};

static RUBY: Syntax = Syntax {
    line_comments: &["#"],
    quotes: &['"', '\''],
    keywords: &[
        "alias", "and", "begin", "break", "case", "class", "def", "do", "else", "elsif", "end",
        "ensure", "for", "if", "in", "module", "next", "not", "or", "redo", "require", "rescue",
        "retry", "return", "self", "super", "then", "unless", "until", "when", "while", "yield",
    ],
    literals: &["true", "false", "nil"],
    ..BASE
};

static SHELL: Syntax = Syntax {
    line_comments: &["#"],
    quotes: &['"', '\''],
    keywords: &[
        "case", "do", "done", "elif", "else", "esac", "exit", "export", "fi", "for", "function",
        "if", "in", "local", "readonly", "return", "set", "then", "until", "while",
    ],
    literals: &["true", "false"],
    variables: true,
    ..BASE
};

/// TOML, INI, YAML, Dockerfiles, Makefiles: comments, strings, numbers, literals.
static CONFIG: Syntax = Syntax {
    line_comments: &["#"],
    quotes: &['"', '\''],
    literals: &["true", "false", "null", "yes", "no", "on", "off"],
    ..BASE
};

static JSON: Syntax = Syntax {
    quotes: &['"'],
    literals: &["true", "false", "null"],
    ..BASE
};

static SQL: Syntax = Syntax {
    line_comments: &["--"],
    block_comment: Some(("/*", "*/")),
    quotes: &['\'', '"'],
    keywords: &[
        "select",
        "from",
        "where",
        "insert",
        "into",
        "values",
        "update",
        "set",
        "delete",
        "create",
        "table",
        "index",
        "drop",
        "alter",
        "add",
        "column",
        "primary",
        "key",
        "foreign",
        "references",
        "join",
        "left",
        "right",
        "inner",
        "outer",
        "on",
        "and",
        "or",
        "not",
        "null",
        "is",
        "in",
        "as",
        "group",
        "by",
        "order",
        "limit",
        "offset",
        "having",
        "distinct",
        "union",
        "all",
        "exists",
        "begin",
        "commit",
        "rollback",
        "default",
        "unique",
        "if",
        "returning",
        "with",
        "case",
        "when",
        "then",
        "else",
        "end",
    ],
    literals: &["true", "false"],
    case_insensitive: true,
    ..BASE
};

static CSS: Syntax = Syntax {
    block_comment: Some(("/*", "*/")),
    quotes: &['"', '\''],
    ..BASE
};

static LUA: Syntax = Syntax {
    line_comments: &["--"],
    quotes: &['"', '\''],
    keywords: &[
        "and", "break", "do", "else", "elseif", "end", "for", "function", "goto", "if", "in",
        "local", "not", "or", "repeat", "return", "then", "until", "while",
    ],
    literals: &["true", "false", "nil"],
    ..BASE
};

/// The syntax of a file, from its name; `None` shows it plain.
pub(super) fn syntax_for_path(path: &str) -> Option<&'static Syntax> {
    let name = path.rsplit('/').next().unwrap_or(path);
    match name {
        "Makefile" | "makefile" | "GNUmakefile" | "Dockerfile" | "Containerfile" => {
            return Some(&CONFIG)
        }
        _ => {}
    }
    let extension = name.rsplit_once('.').map(|(_, e)| e)?;
    syntax_for_name(extension)
}

/// The syntax named by a Markdown fence's language or a file extension.
pub(super) fn syntax_for_name(name: &str) -> Option<&'static Syntax> {
    Some(match name.to_ascii_lowercase().as_str() {
        "rs" | "rust" => &RUST,
        "c" | "h" | "cc" | "cpp" | "cxx" | "hpp" | "hh" | "cs" | "csharp" | "java" | "kt"
        | "kts" | "kotlin" | "scala" | "swift" | "dart" | "php" | "proto" | "zig" => &C_LIKE,
        "go" | "golang" => &GO,
        "js" | "mjs" | "cjs" | "jsx" | "ts" | "mts" | "cts" | "tsx" | "javascript"
        | "typescript" => &JAVASCRIPT,
        "py" | "pyi" | "python" => &PYTHON,
        "rb" | "ruby" => &RUBY,
        "sh" | "bash" | "zsh" | "shell" | "console" => &SHELL,
        "toml" | "ini" | "cfg" | "conf" | "yaml" | "yml" | "dockerfile" | "makefile" | "mk"
        | "env" | "properties" => &CONFIG,
        "json" | "jsonc" | "json5" => &JSON,
        "sql" => &SQL,
        "css" | "scss" | "less" => &CSS,
        "lua" => &LUA,
        _ => return None,
    })
}

/// What a line leaves open for the next one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(super) enum Carry {
    #[default]
    Nothing,
    BlockComment,
    LongString(&'static str),
}

/// The byte index just past the first `end` (ASCII) in `text` from `from`, skipping
/// characters escaped with a backslash when `escapes`. Only ASCII is compared, so the index
/// is always on a character boundary.
fn find_end(text: &str, from: usize, end: &str, escapes: bool) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut i = from;
    while i < bytes.len() {
        if escapes && bytes[i] == b'\\' {
            i += 2;
            continue;
        }
        if bytes[i..].starts_with(end.as_bytes()) {
            return Some(i + end.len());
        }
        i += 1;
    }
    None
}

fn is_name_start(c: char) -> bool {
    c.is_alphabetic() || c == '_'
}

fn is_name_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// The end of the run of characters from `from` that satisfy `keep`.
fn run_end(text: &str, from: usize, keep: impl Fn(char) -> bool) -> usize {
    text[from..]
        .char_indices()
        .find(|&(_, c)| !keep(c))
        .map_or(text.len(), |(i, _)| from + i)
}

/// A character literal starting at `from` (`'a'`, `'\n'`, `'\u{1F600}'`): its end.
fn char_literal_end(text: &str, from: usize) -> Option<usize> {
    let rest = &text[from + 1..];
    let mut chars = rest.char_indices();
    match chars.next()? {
        (_, '\\') => {
            let close = rest.get(1..)?.find('\'')? + 1;
            (close <= 10).then_some(from + 1 + close + 1)
        }
        (_, '\'') => None,
        (_, _) => match chars.next()? {
            (i, '\'') => Some(from + 1 + i + 1),
            _ => None,
        },
    }
}

/// The pieces of a line, as byte ranges with their class; adjacent plain text is one piece.
#[derive(Debug, Default)]
struct Pieces(Vec<(Class, usize, usize)>);

impl Pieces {
    fn push(&mut self, class: Class, start: usize, end: usize) {
        if start == end {
            return;
        }
        match self.0.last_mut() {
            Some((Class::Plain, _, last_end)) if class == Class::Plain && *last_end == start => {
                *last_end = end;
            }
            _ => self.0.push((class, start, end)),
        }
    }
}

/// The pieces of one line, and what it leaves open for the next.
fn lex<'a>(syntax: &Syntax, line: &'a str, carry: &mut Carry) -> Vec<(Class, &'a str)> {
    let mut pieces = Pieces::default();
    let end = line.len();
    let mut i = lex_carried(syntax, line, carry, &mut pieces);
    'line: while i < end {
        let rest = &line[i..];
        // `#` starts a shell comment only at a word's start (`$#`, `a#b` are not comments).
        let at_word_start = !syntax.variables
            || i == 0
            || line[..i].ends_with(char::is_whitespace)
            || line[..i].ends_with(';');
        if at_word_start && syntax.line_comments.iter().any(|c| rest.starts_with(c)) {
            pieces.push(Class::Comment, i, end);
            break;
        }
        if let Some((start, close)) = syntax.block_comment {
            if rest.starts_with(start) {
                if let Some(stop) = find_end(line, i + start.len(), close, false) {
                    pieces.push(Class::Comment, i, stop);
                    i = stop;
                    continue;
                }
                pieces.push(Class::Comment, i, end);
                *carry = Carry::BlockComment;
                break;
            }
        }
        for delimiter in syntax.long_strings {
            if rest.starts_with(delimiter) {
                if let Some(stop) = find_end(line, i + delimiter.len(), delimiter, true) {
                    pieces.push(Class::String, i, stop);
                    i = stop;
                    continue 'line;
                }
                pieces.push(Class::String, i, end);
                *carry = Carry::LongString(delimiter);
                break 'line;
            }
        }
        let Some(c) = rest.chars().next() else { break };
        let (class, stop) = lex_token(syntax, line, i, c);
        pieces.push(class, i, stop);
        i = stop;
    }
    pieces
        .0
        .into_iter()
        .map(|(class, start, stop)| (class, &line[start..stop]))
        .collect()
}

/// Closes what the previous line left open; where the rest of the line starts.
fn lex_carried(syntax: &Syntax, line: &str, carry: &mut Carry, pieces: &mut Pieces) -> usize {
    let (class, close, escapes) = match *carry {
        Carry::Nothing => return 0,
        Carry::BlockComment => (
            Class::Comment,
            syntax.block_comment.map_or("*/", |(_, close)| close),
            false,
        ),
        Carry::LongString(delimiter) => (Class::String, delimiter, true),
    };
    match find_end(line, 0, close, escapes) {
        Some(stop) => {
            pieces.push(class, 0, stop);
            *carry = Carry::Nothing;
            stop
        }
        None => {
            pieces.push(class, 0, line.len());
            line.len()
        }
    }
}

/// The token starting at `i` (whose first character is `c`): its class and end.
fn lex_token(syntax: &Syntax, line: &str, i: usize, c: char) -> (Class, usize) {
    let rest = &line[i..];
    if syntax.quotes.contains(&c) {
        let mut quote = [0u8; 4];
        let quote = c.encode_utf8(&mut quote);
        let stop = find_end(line, i + c.len_utf8(), quote, true).unwrap_or(line.len());
        return (Class::String, stop);
    }
    if c == '\'' && syntax.char_literals {
        if let Some(stop) = char_literal_end(line, i) {
            return (Class::String, stop);
        }
    }
    if c.is_ascii_digit() {
        // Digits, suffixes (`2u64`, `0x1F`) and a decimal point followed by a digit: `1..10`'s
        // dots and `2u64.pow`'s are not the number's.
        let bytes = line.as_bytes();
        let mut stop = i;
        while stop < bytes.len() {
            let b = bytes[stop];
            let decimal = b == b'.' && bytes.get(stop + 1).is_some_and(u8::is_ascii_digit);
            if !(b.is_ascii_alphanumeric() || b == b'_' || decimal) {
                break;
            }
            stop += 1;
        }
        return (Class::Number, stop);
    }
    if is_name_start(c) {
        let stop = run_end(line, i, is_name_char);
        let name = &line[i..stop];
        let is = |list: &[&str]| {
            if syntax.case_insensitive {
                list.iter().any(|k| k.eq_ignore_ascii_case(name))
            } else {
                list.contains(&name)
            }
        };
        let after = &line[stop..];
        if syntax.rust_meta && after.starts_with('!') && !after.starts_with("!=") {
            return (Class::Meta, stop + 1);
        }
        let class = if is(syntax.keywords) {
            Class::Keyword
        } else if is(syntax.literals) {
            Class::Literal
        } else if name.len() > 1 && name.starts_with(char::is_uppercase) {
            Class::Type
        } else {
            Class::Plain
        };
        return (class, stop);
    }
    if syntax.rust_meta && (rest.starts_with("#[") || rest.starts_with("#![")) {
        if let Some(close) = rest.find(']') {
            return (Class::Meta, i + close + 1);
        }
    }
    if syntax.decorators && c == '@' {
        let stop = run_end(line, i + 1, |c| is_name_char(c) || c == '.');
        if stop > i + 1 {
            return (Class::Meta, stop);
        }
    }
    if syntax.variables && c == '$' {
        let stop = if rest.starts_with("${") {
            rest.find('}').map_or(line.len(), |close| i + close + 1)
        } else {
            run_end(line, i + 1, is_name_char)
        };
        if stop > i + 1 {
            return (Class::Meta, stop);
        }
    }
    (Class::Plain, i + c.len_utf8())
}

/// One line as markup: highlighted when its language is known.
pub(super) fn highlight(syntax: Option<&Syntax>, line: &str, carry: &mut Carry) -> Markup {
    let Some(syntax) = syntax else {
        return html! { (line) };
    };
    let pieces = lex(syntax, line, carry);
    html! {
        @for (class, text) in pieces {
            @match class.css() {
                Some(css) => { i class=(css) { (text) } }
                None => { (text) }
            }
        }
    }
}

/// Lines of a file starting at line `first`, each with its number (cited lines).
pub(super) fn numbered_lines(path: &str, first: u64, lines: &[String]) -> Markup {
    let syntax = syntax_for_path(path);
    let mut carry = Carry::default();
    html! {
        div.code.cited {
            @for (offset, line) in lines.iter().enumerate() {
                div data-n=(first + offset as u64) { (highlight(syntax, line, &mut carry)) }
            }
        }
    }
}

/// A Markdown code block: highlighted when its fence names a language this knows.
pub(super) fn block(language: &str, text: &str) -> Markup {
    let syntax = syntax_for_name(language.split([' ', ',']).next().unwrap_or(""));
    let mut carry = Carry::default();
    html! {
        pre.md-code {
            code {
                @for line in text.lines() {
                    (highlight(syntax, line, &mut carry)) "\n"
                }
            }
        }
    }
}

/// What a line of a unified diff is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LineKind {
    Hunk,
    Context,
    Added,
    Removed,
    /// `\ No newline at end of file`.
    Note,
}

#[derive(Debug)]
struct DiffLine<'a> {
    kind: LineKind,
    old: Option<u64>,
    new: Option<u64>,
    text: &'a str,
}

/// One file's part of a unified diff.
#[derive(Debug)]
struct DiffFile<'a> {
    path: String,
    /// What git says besides hunks: `new file mode 100644`, `rename from …`, `Binary files …`.
    notes: Vec<&'a str>,
    lines: Vec<DiffLine<'a>>,
    additions: u64,
    deletions: u64,
}

/// `a/x` or `"b/x y"` → `x`, `x y`.
fn diff_path(text: &str) -> String {
    let text = text.trim_end_matches('\t');
    let text = text
        .strip_prefix('"')
        .and_then(|t| t.strip_suffix('"'))
        .unwrap_or(text);
    text.strip_prefix("a/")
        .or_else(|| text.strip_prefix("b/"))
        .unwrap_or(text)
        .to_string()
}

/// The start lines of a hunk header `@@ -12,5 +12,6 @@ …`.
fn hunk_starts(header: &str) -> Option<(u64, u64)> {
    let mut parts = header.split_whitespace().skip(1);
    let start = |part: Option<&str>, sign: char| -> Option<u64> {
        let part = part?.strip_prefix(sign)?;
        part.split(',').next()?.parse().ok()
    };
    Some((start(parts.next(), '-')?, start(parts.next(), '+')?))
}

/// A unified diff (`git diff-tree -p`) split per file.
fn parse_diff(diff: &str) -> Vec<DiffFile<'_>> {
    let mut files: Vec<DiffFile<'_>> = Vec::new();
    let (mut old, mut new) = (0u64, 0u64);
    let mut in_hunk = false;
    for line in diff.lines() {
        if let Some(rest) = line.strip_prefix("diff --git ") {
            // The path is settled by `+++`/`---` when present; `b/…` is the fallback.
            let path = rest.rsplit_once(" b/").map_or_else(
                || diff_path(rest),
                |(_, b)| b.trim_end_matches('"').to_string(),
            );
            files.push(DiffFile {
                path,
                notes: Vec::new(),
                lines: Vec::new(),
                additions: 0,
                deletions: 0,
            });
            in_hunk = false;
            continue;
        }
        if files.is_empty() {
            // A diff without git's headers: one file of unknown name.
            files.push(DiffFile {
                path: String::new(),
                notes: Vec::new(),
                lines: Vec::new(),
                additions: 0,
                deletions: 0,
            });
        }
        let Some(file) = files.last_mut() else { break };
        if line.starts_with("@@") {
            if let Some((o, n)) = hunk_starts(line) {
                (old, new) = (o, n);
            }
            in_hunk = true;
            file.lines.push(DiffLine {
                kind: LineKind::Hunk,
                old: None,
                new: None,
                text: line,
            });
            continue;
        }
        if !in_hunk {
            if let Some(path) = line.strip_prefix("+++ ") {
                if path != "/dev/null" {
                    file.path = diff_path(path);
                }
            } else if let Some(path) = line.strip_prefix("--- ") {
                if path != "/dev/null" && file.path.is_empty() {
                    file.path = diff_path(path);
                }
            } else if !line.starts_with("index ") {
                file.notes.push(line);
            }
            continue;
        }
        let (kind, old_number, new_number) = match line.chars().next() {
            Some('+') => {
                new += 1;
                file.additions += 1;
                (LineKind::Added, None, Some(new - 1))
            }
            Some('-') => {
                old += 1;
                file.deletions += 1;
                (LineKind::Removed, Some(old - 1), None)
            }
            Some('\\') => (LineKind::Note, None, None),
            _ => {
                old += 1;
                new += 1;
                (LineKind::Context, Some(old - 1), Some(new - 1))
            }
        };
        file.lines.push(DiffLine {
            kind,
            old: old_number,
            new: new_number,
            text: line,
        });
    }
    files
}

/// Files folded from the start: lockfiles and very long diffs.
fn folded(file: &DiffFile<'_>) -> bool {
    const LOCKFILES: &[&str] = &[
        "Cargo.lock",
        "package-lock.json",
        "yarn.lock",
        "pnpm-lock.yaml",
        "go.sum",
        "poetry.lock",
        "Gemfile.lock",
        "composer.lock",
    ];
    let name = file.path.rsplit('/').next().unwrap_or(&file.path);
    LOCKFILES.contains(&name) || file.lines.len() > 600
}

/// A proposal's diff: one foldable section per file, with its additions and deletions,
/// line numbers and highlighted lines.
pub(super) fn diff(diff: &str) -> Markup {
    let files = parse_diff(diff);
    html! {
        div.diff {
            @for file in &files {
                details.file open[!folded(file)] {
                    summary {
                        span.mono.path { (if file.path.is_empty() { "(diff)" } else { &file.path }) }
                        " "
                        span.stat {
                            span.added { "+" (file.additions) } " " span.removed { "−" (file.deletions) }
                        }
                        @if folded(file) { " " span.muted { "(folded: open to read)" } }
                    }
                    @for note in &file.notes { p.muted.mono.note { (note) } }
                    @if !file.lines.is_empty() {
                        div.code { @for line in file_lines(file) { (line) } }
                    }
                }
            }
        }
    }
}

/// A file's lines, each highlighted on its own side: a removed line's unclosed comment does
/// not colour the added lines after it. A hunk starts both sides afresh.
fn file_lines(file: &DiffFile<'_>) -> Vec<Markup> {
    let syntax = syntax_for_path(&file.path);
    let mut before = Carry::default();
    let mut after = Carry::default();
    let mut lines = Vec::with_capacity(file.lines.len());
    for line in &file.lines {
        let (class, marker, body) = match line.kind {
            LineKind::Hunk => {
                before = Carry::default();
                after = Carry::default();
                lines.push(html! { div.h { (line.text) } });
                continue;
            }
            LineKind::Note => {
                lines.push(html! { div.x { (line.text) } });
                continue;
            }
            LineKind::Added => (Some("a"), "+", line.text.get(1..).unwrap_or("")),
            LineKind::Removed => (Some("d"), "-", line.text.get(1..).unwrap_or("")),
            LineKind::Context => (None, " ", line.text.strip_prefix(' ').unwrap_or(line.text)),
        };
        let code = match line.kind {
            LineKind::Removed => highlight(syntax, body, &mut before),
            LineKind::Context => {
                // Context is on both sides.
                if let Some(syntax) = syntax {
                    lex(syntax, body, &mut before);
                }
                highlight(syntax, body, &mut after)
            }
            _ => highlight(syntax, body, &mut after),
        };
        // One gutter: the new side's number, or the old side's for a removed line.
        let number = if line.kind == LineKind::Removed {
            line.old
        } else {
            line.new
        };
        lines.push(html! { div class=[class] data-n=[number] { (marker) (code) } });
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `[k:fn] main(…)`: each highlighted piece in brackets with its class letter.
    fn render(syntax: &Syntax, lines: &[&str]) -> Vec<String> {
        let mut carry = Carry::default();
        lines
            .iter()
            .map(|line| {
                lex(syntax, line, &mut carry)
                    .into_iter()
                    .map(|(class, text)| match class.css() {
                        Some(css) => format!("[{css}:{text}]"),
                        None => text.to_string(),
                    })
                    .collect()
            })
            .collect()
    }

    fn check(syntax: &Syntax, lines: &[&str], expected: &[&str]) {
        assert_eq!(render(syntax, lines), expected);
    }

    #[test]
    fn rust_is_lexed_into_its_pieces() {
        check(
            &RUST,
            &[
                "pub fn f<'a>(x: &'a str) -> Option<char> { // note",
                "    let c = 'x'; let n = '\\n'; println!(\"{x} \\\" y\", 0x1F, 1..10, 2u64.pow(3));",
                "    #[allow(dead_code)] /* one",
                "    two */ Some(x != y)",
                "    let s = \"open",
                "    still\"; 3.5",
            ],
            &[
                "[k:pub] [k:fn] f<'a>(x: &'a str) -> [t:Option]<char> { [c:// note]",
                "    [k:let] c = [s:'x']; [k:let] n = [s:'\\n']; [m:println!]([s:\"{x} \\\" y\"], [n:0x1F], [n:1]..[n:10], [n:2u64].pow([n:3]));",
                "    [m:#[allow(dead_code)]] [c:/* one]",
                "[c:    two */] [l:Some](x != y)",
                "    [k:let] s = [s:\"open]",
                "[s:    still\"]; [n:3.5]",
            ],
        );
    }

    #[test]
    fn other_languages_know_their_comments_strings_and_variables() {
        check(
            &PYTHON,
            &[
                "@cache",
                "def f(x): return \"\"\"doc",
                "end\"\"\" # done",
                "x = None",
            ],
            &[
                "[m:@cache]",
                "[k:def] f(x): [k:return] [s:\"\"\"doc]",
                "[s:end\"\"\"] [c:# done]",
                "x = [l:None]",
            ],
        );
        check(
            &SHELL,
            &["echo \"$HOME\" ${PATH} $# # comment"],
            &["echo [s:\"$HOME\"] [m:${PATH}] $# [c:# comment]"],
        );
        check(
            &SQL,
            &["SELECT id FROM t -- all"],
            &["[k:SELECT] id [k:FROM] t [c:-- all]"],
        );
        check(
            &JAVASCRIPT,
            &["const s = `a ${b}", "c`; // x"],
            &["[k:const] s = [s:`a ${b}]", "[s:c`]; [c:// x]"],
        );
        check(
            &CONFIG,
            &["name = \"x\" # c"],
            &["name = [s:\"x\"] [c:# c]"],
        );
    }

    #[test]
    fn unknown_files_are_plain_and_names_pick_a_syntax() {
        assert!(syntax_for_path("notes.txt").is_none());
        assert!(syntax_for_path("README").is_none());
        assert!(std::ptr::eq(syntax_for_path("src/lib.rs").unwrap(), &RUST));
        assert!(std::ptr::eq(
            syntax_for_path("a/Dockerfile").unwrap(),
            &CONFIG
        ));
        assert!(std::ptr::eq(
            syntax_for_name("TypeScript").unwrap(),
            &JAVASCRIPT
        ));
        let plain = highlight(None, "<b>", &mut Carry::default()).into_string();
        assert_eq!(plain, "&lt;b&gt;");
    }

    #[test]
    fn highlighted_text_is_escaped() {
        let markup = highlight(
            Some(&RUST),
            "let x = \"<img>\"; // </code>",
            &mut Carry::default(),
        )
        .into_string();
        assert_eq!(
            markup,
            "<i class=\"k\">let</i> x = <i class=\"s\">&quot;&lt;img&gt;&quot;</i>; \
             <i class=\"c\">// &lt;/code&gt;</i>"
        );
    }

    #[test]
    fn odd_input_never_panics() {
        for line in [
            "'", "'\\", "\"\\", "/*", "#[", "${", "@", "1..", "é'ü'", "'é", "r#\"x\"#",
        ] {
            for syntax in [
                &RUST,
                &C_LIKE,
                &GO,
                &JAVASCRIPT,
                &PYTHON,
                &SHELL,
                &SQL,
                &JSON,
            ] {
                let mut carry = Carry::default();
                let pieces = lex(syntax, line, &mut carry);
                let joined: String = pieces.iter().map(|(_, t)| *t).collect();
                assert_eq!(joined, line, "{line:?} loses nothing");
            }
        }
    }

    const DIFF: &str = "diff --git a/src/lib.rs b/src/lib.rs\n\
index 1111111..2222222 100644\n\
--- a/src/lib.rs\n\
+++ b/src/lib.rs\n\
@@ -10,3 +10,4 @@ fn x() {\n\
 context\n\
-old\n\
+new\n\
+more\n\
\\ No newline at end of file\n\
diff --git a/Cargo.lock b/Cargo.lock\n\
new file mode 100644\n\
--- /dev/null\n\
+++ b/Cargo.lock\n\
@@ -0,0 +1 @@\n\
+x\n\
diff --git a/img.png b/img.png\n\
Binary files a/img.png and b/img.png differ\n";

    #[test]
    fn a_diff_is_split_per_file_with_both_sides_numbers() {
        let files = parse_diff(DIFF);
        let summary: Vec<_> = files
            .iter()
            .map(|f| (f.path.as_str(), f.additions, f.deletions, f.notes.clone()))
            .collect();
        assert_eq!(
            summary,
            [
                ("src/lib.rs", 2, 1, vec![]),
                ("Cargo.lock", 1, 0, vec!["new file mode 100644"]),
                (
                    "img.png",
                    0,
                    0,
                    vec!["Binary files a/img.png and b/img.png differ"]
                ),
            ]
        );
        let numbers: Vec<_> = files[0]
            .lines
            .iter()
            .map(|l| (l.kind, l.old, l.new))
            .collect();
        assert_eq!(
            numbers,
            [
                (LineKind::Hunk, None, None),
                (LineKind::Context, Some(10), Some(10)),
                (LineKind::Removed, Some(11), None),
                (LineKind::Added, None, Some(11)),
                (LineKind::Added, None, Some(12)),
                (LineKind::Note, None, None),
            ]
        );
        let page = diff(DIFF).into_string();
        assert_eq!(page.matches("<details").count(), 3);
        assert_eq!(
            page.matches("<details class=\"file\" open").count(),
            2,
            "the lockfile is folded"
        );
        assert!(page.contains("data-n=\"12\""));
        assert!(
            page.contains("<div class=\"a\" data-n=\"11\">+new</div>"),
            "{page}"
        );
        assert!(
            page.contains("<div class=\"d\" data-n=\"11\">-old</div>"),
            "{page}"
        );
        assert!(page.contains("<div data-n=\"10\"> context</div>"), "{page}");
    }

    #[test]
    fn a_diff_without_headers_is_one_file() {
        let files = parse_diff("@@ -1 +1 @@\n-a\n+<b>\n");
        assert_eq!(files.len(), 1);
        assert_eq!((files[0].additions, files[0].deletions), (1, 1));
        assert!(diff("@@ -1 +1 @@\n-a\n+<b>\n")
            .into_string()
            .contains("&lt;b&gt;"));
    }
}
