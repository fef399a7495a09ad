//! The Kubernetes manifests under deploy/kubernetes/, checked textually (no
//! YAML parser among the dependencies): probes on the right paths, non-root,
//! read-only root with a writable data volume, IRSA wiring, tokens from a
//! Secret, shutdown timing, and agreement with the Dockerfile.

use std::path::Path;

const DEPLOYMENT: &str = include_str!("../deploy/kubernetes/deployment.yaml");
const SERVICE: &str = include_str!("../deploy/kubernetes/service.yaml");
const SERVICE_ACCOUNT: &str = include_str!("../deploy/kubernetes/serviceaccount.yaml");
const PDB: &str = include_str!("../deploy/kubernetes/poddisruptionbudget.yaml");
const KUSTOMIZATION: &str = include_str!("../deploy/kubernetes/kustomization.yaml");
const DOCKERFILE: &str = include_str!("../Dockerfile");

fn indent(line: &str) -> usize {
    line.len() - line.trim_start().len()
}

fn unquote(v: &str) -> &str {
    let v = v.trim();
    v.strip_prefix('"')
        .and_then(|s| s.strip_suffix('"'))
        .unwrap_or(v)
}

/// The lines of the block that `key:` opens (more indented than it), for the
/// first occurrence of `key:` as a mapping key in `text`.
fn block<'a>(text: &'a str, key: &str) -> Vec<&'a str> {
    let lines: Vec<&str> = text.lines().collect();
    let start = lines
        .iter()
        .position(|l| {
            let t = l.trim_start().trim_start_matches("- ");
            t == format!("{key}:") || t.starts_with(&format!("{key}: "))
        })
        .unwrap_or_else(|| panic!("no `{key}:` in manifest"));
    let base = indent(lines[start]);
    lines[start + 1..]
        .iter()
        .take_while(|l| l.trim().is_empty() || l.trim_start().starts_with('#') || indent(l) > base)
        .copied()
        .filter(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))
        .collect()
}

/// The value of `key: value` on the first line that has it within `lines`.
fn value<'a>(lines: &[&'a str], key: &str) -> Option<&'a str> {
    lines.iter().find_map(|l| {
        let t = l.trim_start().trim_start_matches("- ");
        t.strip_prefix(&format!("{key}:"))
            .map(|v| unquote(v.split(" #").next().unwrap()))
            .filter(|v| !v.is_empty())
    })
}

fn all_lines(text: &str) -> Vec<&str> {
    text.lines().collect()
}

/// Container env: `- name: X` then `value: Y` (None for valueFrom).
fn env(name: &str) -> Option<String> {
    let lines = all_lines(DEPLOYMENT);
    let i = lines
        .iter()
        .position(|l| l.trim() == format!("- name: {name}"))?;
    let next = lines[i + 1..]
        .iter()
        .find(|l| !l.trim().is_empty() && !l.trim_start().starts_with('#'))?;
    next.trim()
        .strip_prefix("value:")
        .map(|v| unquote(v).to_string())
}

fn env_from_secret(name: &str) -> bool {
    let lines = all_lines(DEPLOYMENT);
    let Some(i) = lines
        .iter()
        .position(|l| l.trim() == format!("- name: {name}"))
    else {
        return false;
    };
    let rest: Vec<&str> = lines[i + 1..]
        .iter()
        .take_while(|l| !l.trim_start().starts_with("- name:"))
        .copied()
        .collect();
    rest.iter().any(|l| l.trim() == "valueFrom:")
        && rest.iter().any(|l| l.trim() == "secretKeyRef:")
}

fn bytes(quantity: &str) -> u64 {
    let q = quantity.trim();
    let digits: String = q.chars().take_while(|c| c.is_ascii_digit()).collect();
    let n: u64 = digits.parse().unwrap_or_else(|_| panic!("not a size: {q}"));
    let unit = q[digits.len()..].trim().to_ascii_lowercase();
    n * match unit.as_str() {
        "" | "b" => 1,
        "ki" | "kib" => 1 << 10,
        "mi" | "mib" => 1 << 20,
        "gi" | "gib" => 1 << 30,
        "k" | "kb" => 1_000,
        "m" | "mb" => 1_000_000,
        "g" | "gb" => 1_000_000_000,
        other => panic!("unknown unit {other} in {q}"),
    }
}

/// `ENV`/`USER` values of the Dockerfile's final stage, textually.
fn dockerfile_final_stage() -> String {
    let lines: Vec<&str> = DOCKERFILE.lines().collect();
    let from = lines
        .iter()
        .rposition(|l| l.trim_start().to_ascii_uppercase().starts_with("FROM "))
        .unwrap();
    lines[from..].join("\n")
}

#[test]
fn deployment_runs_replicas_of_a_non_root_read_only_container() {
    assert!(DEPLOYMENT.contains("kind: Deployment"));
    let replicas: u32 = value(&all_lines(DEPLOYMENT), "replicas")
        .expect("replicas")
        .parse()
        .unwrap();
    assert!(replicas >= 2, "replicas: {replicas}");

    // Pod level (the first securityContext) ...
    let pod = block(DEPLOYMENT, "securityContext");
    assert_eq!(value(&pod, "runAsNonRoot"), Some("true"));
    let uid: u32 = value(&pod, "runAsUser").unwrap().parse().unwrap();
    assert!(uid > 0);
    // ... and container level.
    let container = block(DEPLOYMENT, "containers");
    let container_text = container.join("\n");
    let sc = block(&container_text, "securityContext");
    assert_eq!(value(&sc, "readOnlyRootFilesystem"), Some("true"));
    assert_eq!(value(&sc, "allowPrivilegeEscalation"), Some("false"));
    assert_eq!(value(&sc, "runAsNonRoot"), Some("true"));
    assert!(
        block(&sc.join("\n"), "capabilities")
            .join(" ")
            .contains("ALL"),
        "capabilities not dropped"
    );

    // The uid is the image's USER.
    let uid = value(&block(DEPLOYMENT, "securityContext"), "runAsUser").unwrap();
    let user = dockerfile_final_stage()
        .lines()
        .rev()
        .find_map(|l| l.trim().strip_prefix("USER ").map(str::to_string))
        .expect("USER in the Dockerfile's final stage");
    assert_eq!(
        user.split(':').next().unwrap(),
        uid,
        "runAsUser vs Dockerfile USER"
    );

    let resources = block(&container_text, "resources");
    let resources_text = resources.join("\n");
    let requests = block(&resources_text, "requests");
    let limits = block(&resources_text, "limits");
    assert!(value(&requests, "cpu").is_some() && value(&requests, "memory").is_some());
    let mem_limit = value(&limits, "memory").expect("a memory limit");
    // DuckDB's memory_limit must fit in the container's.
    let duck = env("DUCKGATE_MEMORY_LIMIT").expect("DUCKGATE_MEMORY_LIMIT set");
    assert!(
        bytes(&duck) < bytes(mem_limit),
        "DUCKGATE_MEMORY_LIMIT {duck} >= container limit {mem_limit}"
    );
}

#[test]
fn probes_use_healthz_for_liveness_and_readyz_for_readiness() {
    let liveness = block(DEPLOYMENT, "livenessProbe");
    assert_eq!(value(&liveness, "path"), Some("/healthz"));
    let readiness = block(DEPLOYMENT, "readinessProbe");
    assert_eq!(value(&readiness, "path"), Some("/readyz"));
    let startup = block(DEPLOYMENT, "startupProbe");
    assert_eq!(value(&startup, "path"), Some("/healthz"));
    for probe in [&liveness, &readiness, &startup] {
        assert_eq!(value(probe, "port"), Some("http"), "probe port");
        assert!(value(probe, "timeoutSeconds").is_some());
    }

    // The named port is the one the gateway listens on, and the Service targets it.
    let ports = block(DEPLOYMENT, "ports");
    assert_eq!(value(&ports, "name"), Some("http"));
    let container_port = value(&ports, "containerPort").unwrap();
    let listen = env("DUCKGATE_LISTEN").expect("DUCKGATE_LISTEN");
    assert_eq!(listen, format!("0.0.0.0:{container_port}"));
    assert!(
        dockerfile_final_stage().contains(&format!("EXPOSE {container_port}")),
        "the image EXPOSEs another port than {container_port}"
    );
    assert_eq!(value(&all_lines(SERVICE), "targetPort"), Some("http"));
}

#[test]
fn data_dir_and_home_are_on_an_empty_dir_volume() {
    let data_dir = env("DUCKGATE_DATA_DIR").expect("DUCKGATE_DATA_DIR");
    let home = env("HOME").expect("HOME");
    let mounts = block(DEPLOYMENT, "volumeMounts");
    let mut lines = mounts.iter();
    let mut covered = None;
    while let Some(l) = lines.next() {
        if let Some(name) = l.trim().strip_prefix("- name:") {
            let path = lines
                .next()
                .and_then(|p| p.trim().strip_prefix("mountPath:"))
                .map(|p| unquote(p).to_string())
                .unwrap_or_default();
            if !path.is_empty() && data_dir.starts_with(&path) && home.starts_with(&path) {
                covered = Some(name.trim().to_string());
            }
        }
    }
    let volume = covered.expect("no volumeMount covers DUCKGATE_DATA_DIR and HOME");
    let volumes = block(DEPLOYMENT, "volumes");
    let i = volumes
        .iter()
        .position(|l| l.trim() == format!("- name: {volume}"))
        .expect("the mounted volume is declared");
    assert_eq!(
        volumes[i + 1].trim(),
        "emptyDir:",
        "{volume} is not an emptyDir"
    );

    // The extension directory is the image's (read-only, outside the volume).
    let ext = env("DUCKGATE_EXTENSION_DIR").expect("DUCKGATE_EXTENSION_DIR");
    assert!(
        dockerfile_final_stage().contains(&format!("DUCKGATE_EXTENSION_DIR={ext}")),
        "DUCKGATE_EXTENSION_DIR {ext} differs from the image's"
    );
    assert!(!ext.starts_with(&home));
}

#[test]
fn shutdown_timing_is_consistent() {
    let grace_ms: u64 = env("DUCKGATE_SHUTDOWN_GRACE_MS")
        .expect("DUCKGATE_SHUTDOWN_GRACE_MS")
        .parse()
        .unwrap();
    let termination: u64 = value(&all_lines(DEPLOYMENT), "terminationGracePeriodSeconds")
        .expect("terminationGracePeriodSeconds")
        .parse()
        .unwrap();
    let pre_stop = block(DEPLOYMENT, "preStop").join(" ");
    let sleep: u64 = pre_stop
        .split(|c: char| !c.is_ascii_digit())
        .find(|s| !s.is_empty())
        .expect("preStop sleeps")
        .parse()
        .unwrap();
    assert!(pre_stop.contains("sleep"), "{pre_stop}");
    // preStop, then the drain, then up to 5 s for connections to close.
    let needed = sleep + grace_ms.div_ceil(1000) + 5;
    assert!(
        termination >= needed,
        "terminationGracePeriodSeconds {termination} < preStop {sleep} + grace {grace_ms} ms + 5"
    );
}

#[test]
fn credentials_come_from_irsa_and_tokens_from_a_secret() {
    let sa_name = value(&all_lines(DEPLOYMENT), "serviceAccountName").expect("serviceAccountName");
    assert!(SERVICE_ACCOUNT.contains("kind: ServiceAccount"));
    assert_eq!(
        value(&block(SERVICE_ACCOUNT, "metadata"), "name"),
        Some(sa_name)
    );
    let annotations = block(SERVICE_ACCOUNT, "annotations");
    let role = value(&annotations, "eks.amazonaws.com/role-arn").expect("IRSA role annotation");
    assert!(role.starts_with("arn:aws:iam::"), "{role}");
    assert_eq!(
        env("DUCKGATE_S3_ROLE_ARN").as_deref(),
        Some(role),
        "DUCKGATE_S3_ROLE_ARN differs from the ServiceAccount's role"
    );
    assert_eq!(
        env("DUCKGATE_S3_WEB_IDENTITY_TOKEN_FILE").as_deref(),
        Some("/var/run/secrets/eks.amazonaws.com/serviceaccount/token")
    );
    for name in ["DUCKGATE_QUERY_TOKENS", "DUCKGATE_ADMIN_TOKEN"] {
        assert!(env_from_secret(name), "{name} is not read from a Secret");
        assert!(env(name).is_none(), "{name} has a literal value");
    }
    // No static AWS keys in the manifests.
    for text in [DEPLOYMENT, SERVICE_ACCOUNT, SERVICE, PDB] {
        assert!(!text.contains("AWS_SECRET_ACCESS_KEY") && !text.contains("DUCKGATE_S3_SECRET"));
    }
}

#[test]
fn service_and_pdb_select_the_deployment_pods() {
    let label = "app.kubernetes.io/name";
    let pod_label = value(&block(DEPLOYMENT, "template"), label).expect("pod label");
    assert_eq!(
        value(
            &block(&block(DEPLOYMENT, "selector").join("\n"), "matchLabels"),
            label
        ),
        Some(pod_label)
    );
    assert!(SERVICE.contains("kind: Service"));
    assert_eq!(value(&block(SERVICE, "selector"), label), Some(pod_label));
    assert!(PDB.contains("kind: PodDisruptionBudget"));
    assert!(PDB.contains("apiVersion: policy/v1"));
    assert_eq!(value(&block(PDB, "matchLabels"), label), Some(pod_label));
    let replicas: u32 = value(&all_lines(DEPLOYMENT), "replicas")
        .unwrap()
        .parse()
        .unwrap();
    if let Some(max) = value(&all_lines(PDB), "maxUnavailable") {
        assert!(max.parse::<u32>().unwrap() < replicas);
    } else {
        let min: u32 = value(&all_lines(PDB), "minAvailable")
            .unwrap()
            .parse()
            .unwrap();
        assert!(min < replicas, "minAvailable {min} blocks every drain");
    }
}

#[test]
fn kustomization_lists_every_manifest() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("deploy/kubernetes");
    for entry in std::fs::read_dir(&dir).unwrap() {
        let name = entry.unwrap().file_name().into_string().unwrap();
        if name.ends_with(".yaml") && name != "kustomization.yaml" {
            assert!(
                KUSTOMIZATION.contains(&format!("- {name}")),
                "kustomization.yaml does not list {name}"
            );
        }
    }
}
