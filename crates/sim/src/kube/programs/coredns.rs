//! CoreDNS, as a pod in `kube-system` answers the cluster's DNS: the Corefile it loaded when
//! it started (from its ConfigMap volume), its `rewrite name` rules, the `kubernetes` plugin's
//! names (`svc.ns.svc.cluster.local`, `pod.svc.ns.svc.cluster.local` behind a headless
//! Service), and nothing else: `forward` has no upstream that knows a platform name, so any
//! other name is NXDOMAIN, as the host's resolver answers on a kind node for the seeds'
//! fictional domain.
//!
//! A Corefile CoreDNS cannot parse stops the pod with CoreDNS's own words
//! (`/etc/coredns/Corefile:3 - Error during parsing: Unknown directive 'rewite'`), so it
//! crash-loops. With the `reload` plugin a running pod re-reads its ConfigMap at most every
//! [`RELOAD_INTERVAL`] (the plugin's default) and keeps its old Corefile when the new one does
//! not parse, as the plugin does; without it, a change applies once the pods restart.
//!
//! What resolves is decided by [`lookup`], a pure function of the loaded Corefile and the
//! store's Services and pods; [`super::service`] uses it for every name a program dials.

use super::catalogue::{self, Image};
use super::{Host, Program};
use crate::kube::runtime::ExecCall;
use serde_json::Value;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// How often the `reload` plugin checks the Corefile (its default `30s`).
pub const RELOAD_INTERVAL: Duration = Duration::from_secs(30);
pub use crate::network::CLUSTER_DNS;
/// Where the kind Deployment mounts the Corefile.
const COREFILE_PATH: &str = "/etc/coredns/Corefile";

/// The plugins CoreDNS 1.12 is built with (its `plugin.cfg`): any other directive is an error.
const DIRECTIVES: &[&str] = &[
    "root",
    "metadata",
    "geoip",
    "cancel",
    "tls",
    "timeouts",
    "multisocket",
    "reload",
    "nsid",
    "bufsize",
    "bind",
    "debug",
    "trace",
    "ready",
    "health",
    "pprof",
    "prometheus",
    "errors",
    "log",
    "dnstap",
    "local",
    "dns64",
    "acl",
    "any",
    "chaos",
    "loadbalance",
    "tsig",
    "cache",
    "rewrite",
    "header",
    "dnssec",
    "autopath",
    "minimal",
    "template",
    "transfer",
    "hosts",
    "route53",
    "azure",
    "clouddns",
    "k8s_external",
    "kubernetes",
    "file",
    "auto",
    "secondary",
    "etcd",
    "loop",
    "forward",
    "grpc",
    "erratic",
    "whoami",
    "on",
    "sign",
    "view",
    "nomad",
];

/// One `rewrite name` rule.
#[derive(Debug, Clone)]
enum NameRule {
    Exact(String, String),
    Prefix(String, String),
    Suffix(String, String),
    Substring(String, String),
    Regex(regex::Regex, String),
}

impl NameRule {
    /// The rewritten name (fully qualified, with its dot), or `None` when the rule does not
    /// match.
    fn apply(&self, name: &str) -> Option<String> {
        let fqdn = |text: &str| {
            if text.ends_with('.') {
                text.to_string()
            } else {
                format!("{text}.")
            }
        };
        match self {
            NameRule::Exact(from, to) => (fqdn(from) == name).then(|| fqdn(to)),
            NameRule::Prefix(from, to) => name
                .strip_prefix(from.as_str())
                .map(|rest| format!("{to}{rest}")),
            NameRule::Suffix(from, to) => name
                .strip_suffix(&fqdn(from))
                .map(|rest| fqdn(&format!("{rest}{to}"))),
            NameRule::Substring(from, to) => name
                .contains(from.as_str())
                .then(|| name.replacen(from, to, 1)),
            NameRule::Regex(pattern, to) => {
                let groups = pattern.captures(name)?;
                let mut out = to.clone();
                for index in 0..groups.len() {
                    let value = groups.get(index).map_or("", |m| m.as_str());
                    out = out.replace(&format!("{{{index}}}"), value);
                }
                Some(fqdn(&out))
            }
        }
    }
}

/// A Corefile as CoreDNS loaded it: what decides a name's answer.
#[derive(Debug, Clone)]
pub struct Corefile {
    rules: Vec<NameRule>,
    kubernetes: bool,
    reload: bool,
}

/// A word of the Corefile with its line.
struct Token {
    text: String,
    line: usize,
}

fn tokens(text: &str) -> Vec<Token> {
    let mut out = Vec::new();
    for (index, raw) in text.lines().enumerate() {
        let line = raw.split('#').next().unwrap_or("");
        for word in line.split_whitespace() {
            out.push(Token {
                text: word.to_string(),
                line: index + 1,
            });
        }
    }
    out
}

/// Parses a Corefile as CoreDNS does, as far as the rehearsal needs: server blocks, directives
/// and their blocks, and the arguments of `rewrite name`. The error is CoreDNS's message.
pub fn parse(text: &str) -> Result<Corefile, String> {
    let error = |line: usize, message: String| {
        format!("{COREFILE_PATH}:{line} - Error during parsing: {message}")
    };
    let words = tokens(text);
    let mut corefile = Corefile {
        rules: Vec::new(),
        kubernetes: false,
        reload: false,
    };
    let mut at = 0;
    while at < words.len() {
        // Server keys up to the opening brace.
        while at < words.len() && words[at].text != "{" {
            at += 1;
        }
        if at >= words.len() {
            break;
        }
        at += 1;
        // Directives until the block's closing brace.
        loop {
            let Some(word) = words.get(at) else {
                let line = words.last().map_or(1, |w| w.line);
                return Err(error(line, "Unexpected EOF".to_string()));
            };
            if word.text == "}" {
                at += 1;
                break;
            }
            let directive = word.text.clone();
            let line = word.line;
            if !DIRECTIVES.contains(&directive.as_str()) {
                return Err(error(line, format!("Unknown directive '{directive}'")));
            }
            at += 1;
            let mut arguments = Vec::new();
            while let Some(next) = words.get(at).filter(|w| w.line == line && w.text != "{") {
                if next.text == "}" {
                    break;
                }
                arguments.push(next.text.clone());
                at += 1;
            }
            if words
                .get(at)
                .is_some_and(|w| w.line == line && w.text == "{")
            {
                // The directive's own block: skipped up to its closing brace.
                let mut depth = 0;
                loop {
                    let Some(next) = words.get(at) else {
                        let line = words.last().map_or(1, |w| w.line);
                        return Err(error(line, "Unexpected EOF".to_string()));
                    };
                    at += 1;
                    match next.text.as_str() {
                        "{" => depth += 1,
                        "}" => {
                            depth -= 1;
                            if depth == 0 {
                                break;
                            }
                        }
                        _ => {}
                    }
                }
            }
            match directive.as_str() {
                "kubernetes" => corefile.kubernetes = true,
                "reload" => corefile.reload = true,
                "rewrite" => {
                    if let Some(rule) = rewrite_rule(&arguments).map_err(|m| error(line, m))? {
                        corefile.rules.push(rule);
                    }
                }
                _ => {}
            }
        }
    }
    Ok(corefile)
}

/// A `rewrite` directive's name rule (`None` for the other rule types, which the rehearsal's
/// names never meet), or the plugin's error.
fn rewrite_rule(arguments: &[String]) -> Result<Option<NameRule>, String> {
    let mut words: Vec<&str> = arguments.iter().map(String::as_str).collect();
    if matches!(words.first(), Some(&"stop" | &"continue")) {
        words.remove(0);
    }
    if words.first() != Some(&"name") {
        return Ok(None);
    }
    // `answer auto` / `answer name ...` only rewrite the response back.
    if let Some(answer) = words.iter().position(|word| *word == "answer") {
        words.truncate(answer);
    }
    let rule = match &words[1..] {
        [from, to] => NameRule::Exact(from.to_string(), to.to_string()),
        ["exact", from, to] => NameRule::Exact(from.to_string(), to.to_string()),
        ["prefix", from, to] => NameRule::Prefix(from.to_string(), to.to_string()),
        ["suffix", from, to] => NameRule::Suffix(from.to_string(), to.to_string()),
        ["substring", from, to] => NameRule::Substring(from.to_string(), to.to_string()),
        ["regex", from, to] => NameRule::Regex(
            regex::Regex::new(from).map_err(|_| {
                format!("plugin/rewrite: invalid regex pattern in a name rule: {from}")
            })?,
            to.to_string(),
        ),
        _ => {
            return Err(format!(
                "plugin/rewrite: invalid name rule: {}",
                arguments.join(" ")
            ));
        }
    };
    Ok(Some(rule))
}

/// What CoreDNS answers for a name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Answer {
    /// A Service's cluster IP (namespace, name, ip).
    Service {
        namespace: String,
        name: String,
        ip: String,
    },
    /// A pod behind a headless Service (namespace, pod name).
    Pod { namespace: String, pod: String },
    /// NXDOMAIN for every name the search path tried.
    NoSuchHost,
}

/// The names a pod's resolver asks for `name` (its `/etc/resolv.conf`: `search NS.svc.cluster.local
/// svc.cluster.local cluster.local`, `ndots:5`), each fully qualified.
pub fn search_path(name: &str, namespace: &str) -> Vec<String> {
    if let Some(absolute) = name.strip_suffix('.') {
        return vec![format!("{absolute}.")];
    }
    let searched = [
        format!("{name}.{namespace}.svc.cluster.local."),
        format!("{name}.svc.cluster.local."),
        format!("{name}.cluster.local."),
    ];
    let plain = format!("{name}.");
    if name.matches('.').count() >= 5 {
        std::iter::once(plain).chain(searched).collect()
    } else {
        searched.into_iter().chain(std::iter::once(plain)).collect()
    }
}

/// What `corefile` answers for `name` asked from a pod in `namespace`; `object(store_key,
/// namespace, name)` reads the store.
pub fn lookup(
    corefile: &Corefile,
    name: &str,
    namespace: &str,
    object: &dyn Fn(&str, &str, &str) -> Option<Value>,
) -> Answer {
    for query in search_path(name, namespace) {
        // The first rule that matches rewrites the query (the rules' default is `stop`).
        let asked = corefile
            .rules
            .iter()
            .find_map(|rule| rule.apply(&query))
            .unwrap_or(query);
        if !corefile.kubernetes {
            continue;
        }
        let Some(inside) = asked.strip_suffix(".svc.cluster.local.") else {
            continue;
        };
        let labels: Vec<&str> = inside.split('.').collect();
        match labels.as_slice() {
            [service, ns] => {
                if let Some(found) = object("services", ns, service) {
                    let ip = found["spec"]["clusterIP"].as_str().unwrap_or("None");
                    return Answer::Service {
                        namespace: ns.to_string(),
                        name: service.to_string(),
                        ip: ip.to_string(),
                    };
                }
            }
            [pod, service, ns] => {
                let headless = object("services", ns, service)
                    .is_some_and(|found| found["spec"]["clusterIP"] == "None");
                let member = object("pods", ns, pod).is_some_and(|found| {
                    found["spec"]["subdomain"] == *service || found["spec"]["hostname"] == *pod
                });
                if headless && member {
                    return Answer::Pod {
                        namespace: ns.to_string(),
                        pod: pod.to_string(),
                    };
                }
            }
            _ => {}
        }
    }
    Answer::NoSuchHost
}

/// The Corefile a CoreDNS pod runs with.
#[derive(Debug, Clone)]
struct Loaded {
    corefile: Corefile,
    checked: Instant,
}

/// The Corefiles the CoreDNS pods loaded, by pod uid: shared with every program that resolves
/// a name ([`super::Shared::dns`]).
#[derive(Debug, Clone, Default)]
pub struct Servers {
    loaded: Arc<Mutex<HashMap<String, Loaded>>>,
}

impl Servers {
    /// The Corefile pod `pod_uid` answers with, after the `reload` plugin's check (a Corefile
    /// read by `current` that parses replaces it once [`RELOAD_INTERVAL`] has passed).
    pub fn corefile(
        &self,
        pod_uid: &str,
        current: impl FnOnce() -> Option<String>,
    ) -> Option<Corefile> {
        let mut loaded = self.loaded.lock().unwrap_or_else(|p| p.into_inner());
        let entry = loaded.get_mut(pod_uid)?;
        if entry.corefile.reload && entry.checked.elapsed() >= RELOAD_INTERVAL {
            entry.checked = Instant::now();
            if let Some(Ok(fresh)) = current().map(|text| parse(&text)) {
                entry.corefile = fresh;
            }
        }
        Some(entry.corefile.clone())
    }
}

/// The Corefile in the ConfigMap volume of a CoreDNS pod, as its container sees it.
fn mounted_corefile(pod: &Value, host: &Host) -> Option<String> {
    let namespace = pod["metadata"]["namespace"].as_str().unwrap_or("");
    let lookup = |store_key: &str, name: &str| host.object(store_key, namespace, name);
    pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|volume| volume["name"].as_str())
        .find_map(|volume| super::volumes::files(pod, volume, &lookup).remove("Corefile"))
}

/// The CoreDNS image's program: it loads the Corefile at start.
#[derive(Default)]
pub struct CoreDns;

impl Program for CoreDns {
    fn image(&self) -> &'static Image {
        &catalogue::COREDNS
    }

    fn start(&self, call: &ExecCall, host: &Host) -> Result<(), String> {
        let pod = host
            .object("pods", &call.namespace, &call.pod)
            .ok_or_else(|| format!("pod {} is gone", call.pod))?;
        let text = mounted_corefile(&pod, host)
            .ok_or_else(|| format!("open {COREFILE_PATH}: no such file or directory"))?;
        let corefile = parse(&text)?;
        // The Corefiles of pods that are gone are forgotten here: `stop` has no way to the
        // shared state that holds them.
        let existing: std::collections::HashSet<String> = host
            .all("pods")
            .iter()
            .filter_map(|pod| pod["metadata"]["uid"].as_str().map(str::to_string))
            .collect();
        let mut loaded = host
            .shared()
            .dns
            .loaded
            .lock()
            .unwrap_or_else(|p| p.into_inner());
        loaded.retain(|uid, _| existing.contains(uid));
        loaded.insert(
            call.pod_uid.clone(),
            Loaded {
                corefile,
                checked: Instant::now(),
            },
        );
        Ok(())
    }
}

/// The Corefile the cluster DNS answers with: that of the first ready endpoint of
/// `kube-system/kube-dns` whose pod loaded one; `None` when no CoreDNS pod serves.
pub fn cluster_corefile(host: &Host) -> Option<Corefile> {
    let endpoints = host.object("endpoints", "kube-system", "kube-dns")?;
    crate::kube::endpoints::ready_pods(&endpoints)
        .iter()
        .find_map(|name| {
            let pod = host.object("pods", "kube-system", name)?;
            let uid = pod["metadata"]["uid"].as_str()?.to_string();
            host.shared()
                .dns
                .corefile(&uid, || mounted_corefile(&pod, host))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const REWRITTEN: &str = ".:53 {
    rewrite name regex (.+)\\.local\\.example\\.net gitlab-gateway.gitlab.svc.cluster.local answer auto
    errors
    kubernetes cluster.local in-addr.arpa ip6.arpa {
       pods insecure
       fallthrough in-addr.arpa ip6.arpa
    }
    forward . /etc/resolv.conf {
       max_concurrent 1000
    }
    reload
}
";

    fn store(store_key: &str, namespace: &str, name: &str) -> Option<Value> {
        match (store_key, namespace, name) {
            ("services", "gitlab", "gitlab-gateway") => {
                Some(json!({"spec": {"clusterIP": "10.96.4.2"}}))
            }
            ("services", "postgresql", "postgresql-cnpg-rw") => {
                Some(json!({"spec": {"clusterIP": "10.96.7.1"}}))
            }
            ("services", "openbao", "openbao-internal") => {
                Some(json!({"spec": {"clusterIP": "None"}}))
            }
            ("pods", "openbao", "openbao-0") => {
                Some(json!({"spec": {"hostname": "openbao-0", "subdomain": "openbao-internal"}}))
            }
            _ => None,
        }
    }

    fn service(namespace: &str, name: &str, ip: &str) -> Answer {
        Answer::Service {
            namespace: namespace.into(),
            name: name.into(),
            ip: ip.into(),
        }
    }

    #[test]
    fn kinds_corefile_parses_and_answers_service_names_only() {
        let corefile = parse(crate::kube::KIND_COREFILE).expect("kind's Corefile");
        assert!(corefile.reload);
        for name in [
            "postgresql-cnpg-rw.postgresql",
            "postgresql-cnpg-rw.postgresql.svc",
            "postgresql-cnpg-rw.postgresql.svc.cluster.local",
            "postgresql-cnpg-rw.postgresql.svc.cluster.local.",
        ] {
            assert_eq!(
                lookup(&corefile, name, "gitlab", &store),
                service("postgresql", "postgresql-cnpg-rw", "10.96.7.1"),
                "{name}"
            );
        }
        assert_eq!(
            lookup(&corefile, "postgresql-cnpg-rw", "postgresql", &store),
            service("postgresql", "postgresql-cnpg-rw", "10.96.7.1")
        );
        assert_eq!(
            lookup(
                &corefile,
                "openbao-0.openbao-internal.openbao.svc",
                "x",
                &store
            ),
            Answer::Pod {
                namespace: "openbao".into(),
                pod: "openbao-0".into()
            }
        );
        // No rewrite: the platform's names are nobody's.
        assert_eq!(
            lookup(
                &corefile,
                "registry.local.example.net",
                "gitlab-runner",
                &store
            ),
            Answer::NoSuchHost
        );
        assert_eq!(
            lookup(&corefile, "postgresql-cnpg-rw", "gitlab", &store),
            Answer::NoSuchHost
        );
    }

    #[test]
    fn a_rewrite_sends_the_platforms_names_to_the_gateway() {
        let corefile = parse(REWRITTEN).expect("the rewritten Corefile");
        for name in ["registry.local.example.net", "gitlab.local.example.net"] {
            assert_eq!(
                lookup(&corefile, name, "gitlab-runner", &store),
                service("gitlab", "gitlab-gateway", "10.96.4.2"),
                "{name}"
            );
        }
        assert_eq!(
            lookup(&corefile, "registry.example.net", "gitlab-runner", &store),
            Answer::NoSuchHost
        );
        // A rewrite to a Service that does not exist answers nothing.
        let wrong =
            parse(&REWRITTEN.replace("gitlab-gateway.gitlab", "gitlab-gw.gitlab")).expect("parses");
        assert_eq!(
            lookup(
                &wrong,
                "registry.local.example.net",
                "gitlab-runner",
                &store
            ),
            Answer::NoSuchHost
        );
    }

    #[test]
    fn the_other_name_rules_rewrite_as_coredns_does() {
        let rule = |text: &str| {
            let words: Vec<String> = text.split(' ').map(str::to_string).collect();
            rewrite_rule(&words).expect("valid").expect("a name rule")
        };
        assert_eq!(
            rule("name exact a.example.net gitlab-gateway.gitlab.svc.cluster.local")
                .apply("a.example.net."),
            Some("gitlab-gateway.gitlab.svc.cluster.local.".into())
        );
        assert_eq!(
            rule("name a.example.net b").apply("a.example.net."),
            Some("b.".into())
        );
        assert_eq!(
            rule("name suffix .example.net .gitlab.svc.cluster.local").apply("x.example.net."),
            Some("x.gitlab.svc.cluster.local.".into())
        );
        assert_eq!(
            rule("stop name prefix reg gitlab-reg").apply("registry.x."),
            Some("gitlab-registry.x.".into())
        );
        assert_eq!(rule("name exact a b").apply("c."), None);
        assert!(
            rewrite_rule(&["type".into(), "A".into(), "AAAA".into()])
                .expect("another rule type")
                .is_none()
        );
    }

    #[test]
    fn a_broken_corefile_fails_in_coredns_words() {
        let typo = crate::kube::KIND_COREFILE.replace("    reload\n", "    relaod\n");
        assert_eq!(
            parse(&typo).expect_err("a typo"),
            "/etc/coredns/Corefile:21 - Error during parsing: Unknown directive 'relaod'"
        );
        let unclosed = ".:53 {\n    errors\n    kubernetes cluster.local {\n       pods insecure\n";
        assert_eq!(
            parse(unclosed).expect_err("no closing brace"),
            "/etc/coredns/Corefile:4 - Error during parsing: Unexpected EOF"
        );
        assert_eq!(
            parse(".:53 {\n    rewrite name regex (.+ x\n}\n").expect_err("a bad regex"),
            "/etc/coredns/Corefile:2 - Error during parsing: plugin/rewrite: invalid regex pattern in a name rule: (.+"
        );
    }

    #[test]
    fn short_names_try_the_search_path_first() {
        assert_eq!(
            search_path("redis-master.redis", "gitlab"),
            vec![
                "redis-master.redis.gitlab.svc.cluster.local.",
                "redis-master.redis.svc.cluster.local.",
                "redis-master.redis.cluster.local.",
                "redis-master.redis.",
            ]
        );
        assert_eq!(search_path("a.b.", "x"), vec!["a.b."]);
    }
}
