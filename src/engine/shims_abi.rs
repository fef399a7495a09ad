//! The Rust declarations of the C++ shims' functions checked against their
//! one C header (`shims.h`, which every shim includes, so the C++ side is
//! checked by its compiler): the same functions, each with the same
//! parameter and return types, mapped C to Rust. A drift was undefined
//! behaviour that compiled.

use std::collections::BTreeMap;

const HEADER: &str = include_str!("shims.h");
const RUST: [&str; 11] = [
    include_str!("errors.rs"),
    include_str!("memory.rs"),
    include_str!("nesting.rs"),
    include_str!("pipe.rs"),
    include_str!("progress.rs"),
    include_str!("s3_paths.rs"),
    include_str!("secrets.rs"),
    include_str!("guard/describe.rs"),
    include_str!("policy.rs"),
    include_str!("priority.rs"),
    include_str!("threads.rs"),
];

/// Splits `s` at top-level commas (not inside parentheses).
fn split_top(s: &str) -> Vec<String> {
    let (mut depth, mut out, mut cur) = (0, Vec::new(), String::new());
    for c in s.chars() {
        match c {
            '(' => depth += 1,
            ')' => depth -= 1,
            ',' if depth == 0 => {
                out.push(std::mem::take(&mut cur));
                continue;
            }
            _ => {}
        }
        cur.push(c);
    }
    if !cur.trim().is_empty() {
        out.push(cur);
    }
    out.into_iter().map(|p| p.trim().to_string()).collect()
}

/// A C type (without its parameter name) as the Rust type it must be.
fn rust_of(c: &str, typedefs: &BTreeMap<String, String>) -> String {
    let c = c.split_whitespace().collect::<Vec<_>>().join(" ");
    if let Some(f) = typedefs.get(&c) {
        return f.clone();
    }
    let stars = c.matches('*').count();
    let base = c.replace('*', " ");
    let words: Vec<&str> = base.split_whitespace().collect();
    // `const T *const *`: the pointee's constness goes with each star.
    let consts: Vec<bool> = {
        let mut v = Vec::new();
        let mut pending = words.first() == Some(&"const");
        for piece in c.split('*').skip(1) {
            v.push(pending);
            pending = piece.trim_start().starts_with("const");
        }
        v
    };
    let name = words
        .iter()
        .find(|w| **w != "const")
        .copied()
        .unwrap_or("void");
    let scalar = match name {
        "void" if stars == 0 => "()".to_string(),
        "void" => "c_void".to_string(),
        "int" => "i32".to_string(),
        "uint64_t" => "u64".to_string(),
        "int64_t" => "i64".to_string(),
        "int32_t" => "i32".to_string(),
        "uint8_t" => "u8".to_string(),
        "size_t" => "usize".to_string(),
        "double" => "f64".to_string(),
        "bool" => "bool".to_string(),
        "char" => "c_char".to_string(),
        other => panic!("shims.h: no Rust type for C type `{other}`"),
    };
    let mut t = scalar;
    // Innermost star first: the one nearest the base type.
    for is_const in consts.iter().take(stars) {
        t = format!("*{} {t}", if *is_const { "const" } else { "mut" });
    }
    t
}

/// A Rust type with parameter names and spaces removed.
fn norm_rust(t: &str) -> String {
    let t = t.trim();
    if let Some(rest) = t.strip_prefix("extern \"C\" fn(") {
        let close = rest.rfind(')').expect("a closing parenthesis");
        let params: Vec<String> = split_top(&rest[..close])
            .iter()
            .map(|p| norm_rust(p.rsplit_once(':').map_or(p.as_str(), |(_, t)| t)))
            .collect();
        let ret = rest[close + 1..].trim().trim_start_matches("->").trim();
        return format!(
            "externfn({})->{}",
            params.join(","),
            if ret.is_empty() { "()" } else { ret }
        );
    }
    t.split_whitespace().collect::<Vec<_>>().join(" ")
}

type Sig = (Vec<String>, String);

fn header() -> BTreeMap<String, Sig> {
    let text: String = HEADER
        .lines()
        .filter(|l| !l.trim_start().starts_with("//") && !l.trim_start().starts_with('#'))
        .collect::<Vec<_>>()
        .join(" ");
    let mut typedefs = BTreeMap::new();
    let mut out = BTreeMap::new();
    for decl in text.split(';') {
        let decl = decl.split_whitespace().collect::<Vec<_>>().join(" ");
        let decl = decl.trim_start_matches("extern \"C\" {").trim().to_string();
        if let Some(t) = decl.strip_prefix("typedef ") {
            // typedef RET (*NAME)(PARAMS)
            let (ret, rest) = t.split_once("(*").expect("a function pointer typedef");
            let (name, params) = rest.split_once(")(").expect("its parameters");
            let params = params.trim_end_matches(')');
            let p: Vec<String> = split_top(params)
                .iter()
                .map(|p| rust_of(strip_name(p), &BTreeMap::new()))
                .collect();
            let r = rust_of(ret, &BTreeMap::new());
            typedefs.insert(
                name.trim().to_string(),
                format!("externfn({})->{r}", p.join(",")),
            );
            continue;
        }
        let Some(open) = decl.find('(') else { continue };
        let head = &decl[..open];
        let Some(name) = head.split([' ', '*']).next_back() else {
            continue;
        };
        if !name.starts_with("duckgate_") {
            continue;
        }
        let ret = rust_of(&head[..head.len() - name.len()], &typedefs);
        let params = &decl[open + 1..decl.rfind(')').expect("a closing parenthesis")];
        let params: Vec<String> = if params.trim() == "void" {
            Vec::new()
        } else {
            split_top(params)
                .iter()
                .map(|p| rust_of(strip_name(p), &typedefs))
                .collect()
        };
        out.insert(name.to_string(), (params, ret));
    }
    out
}

/// `const char *name` -> `const char *`, `uint64_t n` -> `uint64_t`.
fn strip_name(p: &str) -> &str {
    let p = p.trim();
    match p.rfind([' ', '*']) {
        Some(i) => &p[..=i],
        None => p,
    }
}

fn rust() -> BTreeMap<String, Sig> {
    let mut out = BTreeMap::new();
    for file in RUST {
        let mut rest = file;
        while let Some(i) = rest.find("extern \"C\" {\n") {
            let block_start = i + "extern \"C\" {\n".len();
            let end = rest[block_start..].find("\n}").expect("the block's end") + block_start;
            let block = &rest[block_start..end];
            for decl in block.split(';') {
                let decl = decl
                    .lines()
                    .filter(|l| !l.trim_start().starts_with("//"))
                    .collect::<Vec<_>>()
                    .join(" ");
                let Some(at) = decl.find("fn duckgate_") else {
                    continue;
                };
                let decl = &decl[at + 3..];
                let open = decl.find('(').expect("parameters");
                let name = decl[..open].trim().to_string();
                let close = {
                    let mut depth = 0;
                    let mut end = open;
                    for (j, c) in decl[open..].char_indices() {
                        match c {
                            '(' => depth += 1,
                            ')' => {
                                depth -= 1;
                                if depth == 0 {
                                    end = open + j;
                                    break;
                                }
                            }
                            _ => {}
                        }
                    }
                    end
                };
                let params: Vec<String> = split_top(&decl[open + 1..close])
                    .iter()
                    .map(|p| norm_rust(p.split_once(':').map_or(p.as_str(), |(_, t)| t)))
                    .collect();
                let ret = decl[close + 1..].trim().trim_start_matches("->").trim();
                let ret = if ret.is_empty() {
                    "()".to_string()
                } else {
                    norm_rust(ret)
                };
                out.insert(name, (params, ret));
            }
            rest = &rest[end..];
        }
    }
    out
}

#[test]
fn the_rust_declarations_are_the_headers() {
    let (c, r) = (header(), rust());
    assert!(c.len() >= 20, "{c:?}");
    assert_eq!(
        c.keys().collect::<Vec<_>>(),
        r.keys().collect::<Vec<_>>(),
        "functions in shims.h and in Rust's extern blocks"
    );
    for (name, sig) in &c {
        assert_eq!(&r[name], sig, "{name}: Rust's declaration, then shims.h's");
    }
}
