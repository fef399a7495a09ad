//! The full Dockerfile needs a registry for its base images and the network
//! for crates and wheels, which CI does not have, so it is not built here
//! (tests/image.rs builds and runs the runtime-only image, Dockerfile.runtime):
//! these tests read the Dockerfile and check what the gateway relies on. Instructions are parsed textually (continuation lines joined, comments
//! dropped, `${ARG}` defaults substituted).

use std::collections::HashMap;

const DOCKERFILE: &str = include_str!("../../../Dockerfile");
const DOCKERIGNORE: &str = include_str!("../../../.dockerignore");

#[derive(Debug, Clone)]
struct Instruction {
    keyword: String,
    args: String,
}

#[derive(Debug)]
struct Stage {
    from: String,
    name: Option<String>,
    instructions: Vec<Instruction>,
}

impl Stage {
    fn all(&self, keyword: &str) -> Vec<&str> {
        self.instructions
            .iter()
            .filter(|i| i.keyword == keyword)
            .map(|i| i.args.as_str())
            .collect()
    }

    fn last(&self, keyword: &str) -> Option<&str> {
        self.all(keyword).last().copied()
    }

    /// `ENV K=V ...` / `ENV K V` values set in this stage.
    fn env(&self) -> HashMap<String, String> {
        let mut out = HashMap::new();
        for args in self.all("ENV") {
            if args.contains('=') {
                for pair in args.split_whitespace() {
                    if let Some((k, v)) = pair.split_once('=') {
                        out.insert(k.to_string(), v.trim_matches('"').to_string());
                    }
                }
            } else if let Some((k, v)) = args.split_once(char::is_whitespace) {
                out.insert(k.to_string(), v.trim().to_string());
            }
        }
        out
    }
}

/// Joins `\` continuations, drops comments and blank lines.
fn logical_lines(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut current = String::new();
    for raw in text.lines() {
        let line = raw.trim();
        if line.starts_with('#') || (line.is_empty() && current.is_empty()) {
            continue;
        }
        if let Some(head) = line.strip_suffix('\\') {
            current.push_str(head);
            current.push(' ');
        } else {
            current.push_str(line);
            if !current.trim().is_empty() {
                out.push(current.trim().to_string());
            }
            current.clear();
        }
    }
    assert!(
        current.trim().is_empty(),
        "Dockerfile ends in a continuation"
    );
    out
}

/// Global ARG defaults (before the first FROM) and every stage.
fn parse() -> (HashMap<String, String>, Vec<Stage>) {
    let mut args = HashMap::new();
    let mut stages: Vec<Stage> = Vec::new();
    for line in logical_lines(DOCKERFILE) {
        let (keyword, rest) = line.split_once(char::is_whitespace).unwrap_or((&line, ""));
        let keyword = keyword.to_ascii_uppercase();
        let rest = rest.trim().to_string();
        if keyword == "FROM" {
            let words: Vec<&str> = rest
                .split_whitespace()
                .filter(|w| !w.starts_with("--"))
                .collect();
            let name = match words.as_slice() {
                [_, as_, name] if as_.eq_ignore_ascii_case("as") => Some(name.to_string()),
                _ => None,
            };
            stages.push(Stage {
                from: words[0].to_string(),
                name,
                instructions: Vec::new(),
            });
        } else if let Some(stage) = stages.last_mut() {
            stage.instructions.push(Instruction {
                keyword,
                args: rest,
            });
        } else {
            assert_eq!(keyword, "ARG", "only ARG may precede the first FROM");
            if let Some((k, v)) = rest.split_once('=') {
                args.insert(k.to_string(), v.to_string());
            }
        }
    }
    (args, stages)
}

/// Substitutes `${NAME}` with the ARG defaults (global, then the stage's).
fn expand(text: &str, args: &HashMap<String, String>, stage: Option<&Stage>) -> String {
    let mut vars = args.clone();
    if let Some(stage) = stage {
        for a in stage.all("ARG") {
            if let Some((k, v)) = a.split_once('=') {
                vars.insert(k.to_string(), v.to_string());
            }
        }
    }
    // Defaults may name other ARGs (`ARG RUST_IMAGE=rust:${RUST_VERSION}-...`):
    // substitute until nothing changes.
    let mut out = text.to_string();
    loop {
        let before = out.clone();
        for (k, v) in &vars {
            out = out.replace(&format!("${{{k}}}"), v);
        }
        if out == before {
            return out;
        }
    }
}

fn final_stage(stages: &[Stage]) -> &Stage {
    stages.last().expect("a FROM")
}

#[test]
fn is_multi_stage_rust_build_and_slim_debian_runtime() {
    let (args, stages) = parse();
    assert!(stages.len() >= 2, "not multi-stage: {} FROM", stages.len());
    let build = stages
        .iter()
        .find(|s| expand(&s.from, &args, None).starts_with("rust:"))
        .expect("a build stage FROM the official rust image");
    assert!(
        build
            .all("RUN")
            .iter()
            .any(|r| r.contains("cargo build --release") && r.contains("--locked")),
        "the build stage runs `cargo build --release --locked`"
    );
    let runtime = final_stage(&stages);
    let from = expand(&runtime.from, &args, None);
    assert!(
        from.starts_with("debian:") && from.ends_with("-slim"),
        "final stage is FROM {from}, not a slim Debian image"
    );
    // The binary comes from the build stage, not from a build in the runtime image.
    let build_name = build.name.as_deref().expect("the build stage is named");
    let copies = runtime.all("COPY");
    assert!(
        copies
            .iter()
            .any(|c| c.contains(&format!("--from={build_name}")) && c.contains("duckgate")),
        "the runtime stage copies the binary from `{build_name}`: {copies:?}"
    );
    let entrypoint = runtime.last("ENTRYPOINT").expect("an ENTRYPOINT");
    assert!(entrypoint.contains("duckgate"), "{entrypoint}");
    let apt = runtime.all("RUN").join(" ");
    assert!(
        apt.contains("ca-certificates"),
        "ca-certificates installed in the runtime image"
    );
    assert!(
        apt.contains("rm -rf /var/lib/apt/lists"),
        "apt lists cleaned in the same layer"
    );
}

#[test]
fn final_stage_runs_as_a_non_root_user() {
    let (args, stages) = parse();
    let runtime = final_stage(&stages);
    let user = expand(
        runtime.last("USER").expect("USER in the final stage"),
        &args,
        Some(runtime),
    );
    let (name, group) = user.split_once(':').unwrap_or((user.as_str(), ""));
    assert!(
        !matches!(name, "root" | "0") && !matches!(group, "root" | "0"),
        "final USER is {user}"
    );
    // A numeric uid lets Kubernetes' runAsNonRoot verify it; it must exist.
    let uid: u32 = name.parse().expect("USER is a numeric uid");
    assert!(uid >= 1000, "uid {uid} is a system id");
    let runs = runtime.all("RUN").join(" ");
    assert!(
        runs.contains(&format!("--uid {uid}")),
        "no useradd --uid {uid} in the final stage"
    );
    // Nothing after USER switches back.
    let after_user = runtime
        .instructions
        .iter()
        .rev()
        .take_while(|i| i.keyword != "USER")
        .filter(|i| i.keyword == "RUN")
        .count();
    assert_eq!(
        after_user, 0,
        "RUN after USER runs as the unprivileged user; keep setup before it"
    );
}

#[test]
fn httpfs_extension_is_installed_where_the_binary_looks() {
    let (args, stages) = parse();
    let runtime = final_stage(&stages);
    let env = runtime.env();
    let ext_dir = env
        .get("DUCKGATE_EXTENSION_DIR")
        .expect("ENV DUCKGATE_EXTENSION_DIR in the final stage");
    // The path the gateway checks: <dir>/v1.5.5/linux_amd64/httpfs.duckdb_extension.
    let subdir = duckgate::engine::EXTENSION_SUBDIR;
    let want = format!("{ext_dir}/{subdir}/httpfs.duckdb_extension");

    // Some stage installs exactly that file...
    let (installer, _) = stages
        .iter()
        .flat_map(|s| s.all("RUN").into_iter().map(move |r| (s, r)))
        .find(|(s, r)| expand(r, &args, Some(s)).contains(&want))
        .unwrap_or_else(|| panic!("no stage installs {want}"));
    let installer_runs = installer.all("RUN").join(" ");
    let installer_runs = expand(&installer_runs, &args, Some(installer));
    // ...from the PyPI wheel of the same DuckDB release, at build time.
    let version = subdir.split('/').next().unwrap().trim_start_matches('v');
    assert!(
        installer_runs.contains(&format!("duckdb-extension-httpfs=={version}")),
        "the extension comes from the duckdb-extension-httpfs=={version} wheel: {installer_runs}"
    );
    assert!(installer_runs.contains("pip download"), "{installer_runs}");
    assert!(
        installer_runs.contains(&format!("extensions/v{version}/httpfs.duckdb_extension")),
        "the wheel's extensions/v{version}/httpfs.duckdb_extension is what gets installed"
    );
    assert!(
        installer_runs.contains("sha256sum -c"),
        "the extension's hash is checked"
    );

    // ...and the final stage copies that directory to DUCKGATE_EXTENSION_DIR.
    let installer_name = installer
        .name
        .as_deref()
        .expect("the extension stage is named");
    let copied = runtime.all("COPY").iter().any(|c| {
        let words: Vec<&str> = c.split_whitespace().collect();
        words.contains(&format!("--from={installer_name}").as_str())
            && words.last() == Some(&ext_dir.as_str())
    });
    assert!(
        copied,
        "final stage does not COPY --from={installer_name} ... {ext_dir}"
    );
}

#[test]
fn listens_on_the_exposed_port_with_a_healthcheck_on_healthz() {
    let (_, stages) = parse();
    let runtime = final_stage(&stages);
    let env = runtime.env();
    let listen = env.get("DUCKGATE_LISTEN").expect("ENV DUCKGATE_LISTEN");
    let (host, port) = listen.rsplit_once(':').unwrap();
    assert_eq!(host, "0.0.0.0", "a container must listen on all interfaces");
    let exposed: Vec<&str> = runtime
        .all("EXPOSE")
        .iter()
        .flat_map(|e| e.split_whitespace())
        .collect();
    assert!(
        exposed.iter().any(|e| e.trim_end_matches("/tcp") == port),
        "EXPOSE {exposed:?} does not include the listen port {port}"
    );

    let hc = runtime.last("HEALTHCHECK").expect("a HEALTHCHECK");
    assert!(hc.contains("CMD"), "{hc}");
    assert!(
        hc.contains("/healthz"),
        "HEALTHCHECK does not call /healthz: {hc}"
    );
    assert!(
        hc.contains("--timeout="),
        "HEALTHCHECK without a timeout: {hc}"
    );
    // The check reaches the port the gateway listens on: literally, or via
    // DUCKGATE_LISTEN so that overriding it keeps the check right.
    assert!(
        hc.contains(&format!(":{port}/healthz")) || hc.contains("${DUCKGATE_LISTEN##*:}"),
        "HEALTHCHECK does not target port {port}: {hc}"
    );
    // curl is what the check runs, so the runtime image must install it.
    if hc.contains("curl") {
        assert!(
            runtime.all("RUN").join(" ").contains(" curl"),
            "curl not installed"
        );
    }
    assert_eq!(runtime.last("STOPSIGNAL"), Some("SIGTERM"));
}

#[test]
fn data_dir_is_a_writable_volume() {
    let (_, stages) = parse();
    let runtime = final_stage(&stages);
    let env = runtime.env();
    let data = env.get("DUCKGATE_DATA_DIR").expect("ENV DUCKGATE_DATA_DIR");
    let volumes = runtime.all("VOLUME").join(" ");
    let volume = volumes
        .trim_matches(|c| c == '[' || c == ']')
        .split([',', ' '])
        .map(|v| v.trim().trim_matches('"'))
        .find(|v| !v.is_empty() && data.starts_with(v))
        .unwrap_or_else(|| panic!("DUCKGATE_DATA_DIR {data} is not under a VOLUME ({volumes})"));
    // Created and owned by the unprivileged user before the VOLUME line.
    let runs = runtime.all("RUN").join(" ");
    assert!(
        runs.contains(&format!("-o duckgate -g duckgate -m 0700 {volume}")),
        "{volume} is not created owned by the gateway's user"
    );
    // HOME is writable too (DuckDB may write under it).
    assert!(
        env.get("HOME").is_some_and(|h| h.starts_with(volume)),
        "HOME is not on the volume"
    );
}

#[test]
fn dockerignore_keeps_build_output_and_secrets_out_of_the_context() {
    let lines: Vec<&str> = DOCKERIGNORE
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    // Either an allow-list (`*` then `!` exceptions) or explicit exclusions.
    if lines.first() == Some(&"*") {
        for needed in ["!Cargo.toml", "!Cargo.lock", "!src/"] {
            assert!(lines.contains(&needed), ".dockerignore lacks {needed}");
        }
        assert!(
            !lines.iter().any(|l| l.starts_with("!target")),
            "target/ re-included"
        );
    } else {
        assert!(lines.iter().any(|l| l.trim_start_matches('/') == "target"));
    }
    // Everything the build stage COPYs is in the context.
    let (_, stages) = parse();
    for stage in &stages {
        for copy in stage.all("COPY") {
            if copy.contains("--from=") {
                continue;
            }
            let words: Vec<&str> = copy.split_whitespace().collect();
            for src in &words[..words.len() - 1] {
                let src = src.trim_end_matches('/');
                assert!(
                    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
                        .join(src)
                        .exists(),
                    "COPY source {src} does not exist"
                );
                if lines.first() == Some(&"*") {
                    assert!(
                        lines.contains(&format!("!{src}").as_str())
                            || lines.contains(&format!("!{src}/").as_str()),
                        "COPY source {src} is excluded by .dockerignore"
                    );
                }
            }
        }
    }
}

#[test]
fn the_prebuilt_duckdb_library_lands_beside_the_binary() {
    let (args, stages) = parse();
    let build = stages
        .iter()
        .find(|s| expand(&s.from, &args, None).starts_with("rust:"))
        .unwrap();
    // The build links the official library from the pinned npm tarball
    // (build.rs checks its integrity) rather than compiling DuckDB.
    let runs = build.all("RUN").join(" ");
    assert!(
        runs.contains("DUCKGATE_LIBDUCKDB_TGZ") && runs.contains("$DUCKDB_LIB_DIR/libduckdb.so"),
        "{runs}"
    );
    let url = expand("${LIBDUCKDB_TGZ_URL}", &args, Some(build));
    assert!(
        url.ends_with("node-bindings-linux-x64-1.5.5-r.5.tgz"),
        "{url}"
    );
    assert!(include_str!("../../../build.rs").contains("@duckdb/node-bindings-linux-x64@1.5.5-r.5"));
    // The binary's rpath is `$ORIGIN`: both go to ENTRYPOINT's directory.
    let runtime = final_stage(&stages);
    let entry: Vec<String> = serde_json::from_str(runtime.last("ENTRYPOINT").unwrap()).unwrap();
    let dir = std::path::Path::new(&entry[0]).parent().unwrap();
    assert!(
        runtime.all("COPY").iter().any(|c| {
            let w: Vec<&str> = c.split_whitespace().collect();
            w.iter().any(|x| x.ends_with("/libduckdb.so"))
                && w.iter().any(|x| x.ends_with("/duckgate"))
                && std::path::Path::new(w.last().unwrap()) == dir
        }),
        "duckgate and libduckdb.so are not copied together to {}",
        dir.display()
    );
}
