//! The harness (crates/testkit) bound to this build's `bprun` binary.

pub use bprun_testkit::{
    BaoServer, GITLAB_TOKEN, Output, Sim, SimKind, Test, assert_text, bao_binary, expect_output,
    free_port, tool,
};

/// The binary under test.
pub const BPRUN: bprun_testkit::Bprun = bprun_testkit::Bprun::at(env!("CARGO_BIN_EXE_bprun"));

/// A new temporary repository (a folder with `.git`) in which to run `bprun`.
pub fn repo() -> Test {
    BPRUN.test()
}

/// The recap table a human run ends with, as `Output::expect` compares it: `Recap of {script}`
/// (a `script` that ends in ` (check mode)` has the check mode's title and column), one row per
/// step of `steps` (`name: status changes; ...`, changes 0 when left out), and the count line.
/// A `skipped` or `not run` step has no time; write `skipped, timed` for a step that ran and
/// then skipped itself. Every time (and the total) is the normalised `#.## s`.
pub fn expected_recap(script: &str, steps: &str) -> String {
    let steps: Vec<(&str, &str, &str)> = steps
        .split("; ")
        .map(|step| {
            let (name, status) = step.split_once(": ").expect("`name: status` in a recap");
            match status.rsplit_once(' ') {
                Some((status, changes)) if changes.bytes().all(|b| b.is_ascii_digit()) => {
                    (name, status, changes)
                }
                _ => (name, status, "0"),
            }
        })
        .collect();
    let width = steps
        .iter()
        .map(|(name, _, _)| name.chars().count())
        .max()
        .unwrap_or(4)
        .max(4);
    let changes = if script.ends_with(" (check mode)") {
        "would change"
    } else {
        "changes"
    };
    let mut out = format!(
        "Recap of {script}\n  #  {:<width$}  {:<11}  {changes:>12}  {:>9}\n",
        "step", "status", "time"
    );
    let mut counts = [0; 6];
    let labels = [
        "ok",
        "changed",
        "skipped",
        "failed",
        "interrupted",
        "not run",
    ];
    for (index, (name, status, changed)) in steps.iter().enumerate() {
        let (label, time) = match *status {
            "skipped" | "not run" => (*status, "-"),
            "skipped, timed" => ("skipped", "#.## s"),
            other => (other, "#.## s"),
        };
        let slot = labels.iter().position(|known| *known == label);
        counts[slot.unwrap_or_else(|| panic!("unknown step status {status:?}"))] += 1;
        let row = format!(
            "{:>3}  {name:<width$}  {label:<11}  {changed:>12}  {time:>9}",
            index + 1
        );
        out.push_str(row.trim_end());
        out.push('\n');
    }
    let mut parts: Vec<String> = labels[..4]
        .iter()
        .zip(counts)
        .map(|(label, count)| format!("{count} {label}"))
        .collect();
    for (label, count) in labels[4..].iter().zip(&counts[4..]) {
        if *count > 0 {
            parts.push(format!("{count} {label}"));
        }
    }
    let noun = if steps.len() == 1 { "step" } else { "steps" };
    out.push_str(&format!(
        "{} {noun}: {} in #.## s",
        steps.len(),
        parts.join(", ")
    ));
    out
}

/// `template` unindented (see `Output::stdout`), each line `<recap of SCRIPT: STEPS>` in it
/// replaced by `expected_recap(SCRIPT, STEPS)`: a whole expected output with its recap written
/// as one line.
pub fn with_recaps(template: &str) -> String {
    bprun_testkit::unindent(template)
        .split('\n')
        .map(|line| match line.strip_prefix("<recap of ") {
            Some(recap) => {
                let recap = recap.strip_suffix('>').expect("`<recap of SCRIPT: STEPS>`");
                let (script, steps) = recap.split_once(": ").expect("`<recap of SCRIPT: STEPS>`");
                expected_recap(script, steps)
            }
            None => line.to_string(),
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What `bprun rehearse` prints last on stdout when the script made nothing in GitLab.
pub const EMPTY_END_STATE: &str = "\nEnd state of the rehearsal platform:\nGitLab: no groups\n";

/// The platform `bprun rehearse` starts, as it names it on stderr, with `openbao` for the
/// OpenBao it found.
pub fn rehearsal_platform(openbao: &str) -> String {
    format!(
        "rehearsal platform (as phase 2 leaves it):
  GitLab simulator     http://127.0.0.1:<port>
  GitLab Runner        an online instance runner stand-in (as phase 2 registers it)
  Kubernetes simulator https://127.0.0.1:<port>
  OpenBao              {openbao}
"
    )
}

/// `kubectl wait pods -n {namespace} -l {selector} --for=condition=Ready --timeout={timeout}`
/// on `sim` succeeds.
pub fn wait_pods_ready(sim: &Sim, namespace: &str, selector: &str, timeout: &str) {
    sim.kubectl(&[
        "wait",
        "pods",
        "-n",
        namespace,
        "-l",
        selector,
        "--for=condition=Ready",
        &format!("--timeout={timeout}"),
    ])
    .ok();
}

/// `helm install {release} infra/helm-charts/{archive}.tgz -n {namespace} --create-namespace
/// {extra}` on `sim`.
pub fn helm_install(
    sim: &Sim,
    release: &str,
    archive: &str,
    namespace: &str,
    extra: &[&str],
) -> Output {
    let chart = format!(
        "{}/infra/helm-charts/{archive}.tgz",
        env!("CARGO_MANIFEST_DIR")
    );
    let mut args = vec![
        "install",
        release,
        &chart,
        "-n",
        namespace,
        "--create-namespace",
    ];
    args.extend_from_slice(extra);
    sim.helm(&args)
}

/// The stdout of `bprun -q scripts/test.rhai` whose one step, `Wait`, failed.
pub fn wait_failed() -> String {
    with_recaps("[1/1] Wait ... failed (#.## s)\n\n<recap of scripts/test.rhai: Wait: failed>\n")
}

/// The stdout of a run of `scripts/test.rhai` whose one step, `name`, printed nothing and ended
/// `outcome` (`ok`, `failed`, `changed 2`: the status and, when not 0, its changes).
pub fn one_step_run(name: &str, outcome: &str) -> String {
    one_step_run_of("scripts/test.rhai", name, outcome)
}

/// [`one_step_run`] of another `script`.
pub fn one_step_run_of(script: &str, name: &str, outcome: &str) -> String {
    let status = outcome.split(' ').next().unwrap_or(outcome);
    with_recaps(&format!(
        "[1/1] {name} ... {status} (#.## s)\n\n<recap of {script}: {name}: {outcome}>\n"
    ))
}

/// `kubectl wait pod/openbao-0 -n openbao {condition} --timeout={timeout}` on `sim` succeeds.
pub fn wait_openbao_pod(sim: &Sim, condition: &str, timeout: &str) {
    sim.kubectl(&[
        "wait",
        "pod/openbao-0",
        "-n",
        "openbao",
        condition,
        &format!("--timeout={timeout}"),
    ])
    .ok();
}

/// What `kubectl exec` prints on stderr (exit 127) when the container has no `program`.
pub fn exec_not_found(program: &str) -> String {
    format!(
        "OCI runtime exec failed: exec failed: unable to start container process: exec: \"{program}\": executable file not found in $PATH: unknown\n\
         command terminated with exit code 127\n"
    )
}

/// The stderr of a failed one-line `Wait` step that calls `gitlab_wait_pipeline`: `line` is the
/// script's line, `message` the error, `notes` the lines (caused by, hint) under the excerpt.
pub fn gitlab_wait_error(message: &str, line: &str, notes: &str) -> String {
    format!(
        "error: step \"Wait\" failed
  × {message}
   ╭─[scripts/test.rhai:1:19]
 1 │ {line}
   ·                   ──────────┬─────────
   ·                             ╰── failed here
   ╰────
{notes}re-run with --resume to continue from here
"
    )
}

/// A script of this repository, as the tests' copies start.
#[track_caller]
pub fn read_script(script: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(script);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{script}: {e}"))
}

/// Where `source` says `text`: `(line, column)`, 1-based, of its one line that holds `text`.
/// Tests name a frame's place by what the script says there, so a line added above it does not
/// move their expected output.
#[track_caller]
fn place_in(source: &str, script: &str, text: &str) -> (usize, usize) {
    let mut found = source
        .lines()
        .enumerate()
        .filter_map(|(index, line)| line.find(text).map(|at| (index + 1, at + 1)));
    let place = found
        .next()
        .unwrap_or_else(|| panic!("{script} has no line with {text:?}"));
    assert!(
        found.next().is_none(),
        "{script} has more than one line with {text:?}"
    );
    place
}

/// `script:LINE:COLUMN` of `text` on the one line of `script` holding it (where a frame's
/// "called at" line points).
#[track_caller]
pub fn script_location(script: &str, text: &str) -> String {
    source_location(&read_script(script), script, text)
}

/// Like `script_location`, over `source` (a test's edited copy of `script`).
#[track_caller]
pub fn source_location(source: &str, script: &str, text: &str) -> String {
    let (line, column) = place_in(source, script, text);
    format!("{script}:{line}:{column}")
}

/// `template` unindented (see `Output::stderr`) with its one `<frame>` line replaced by `frame`
/// (from `script_frame` or `source_frame`): an expected error whose source frame follows the
/// script's current text.
#[track_caller]
pub fn with_frame(template: &str, frame: &str) -> String {
    let text = bprun_testkit::unindent(template);
    assert_eq!(
        text.matches("<frame>\n").count(),
        1,
        "one `<frame>` line in the template"
    );
    text.replace("<frame>\n", frame)
}

/// `script` as it stands in `copy` (a repository copy whose script a test edited).
pub fn script_in(copy: &Test, script: &str) -> String {
    let path = copy.path().join(script);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// `script:LINE:COLUMN` of the first `text` after the one line holding `anchor`.
#[track_caller]
pub fn script_location_after(script: &str, anchor: &str, text: &str) -> String {
    let source = read_script(script);
    let (from, _) = place_in(&source, script, anchor);
    let (line, column) = source
        .lines()
        .enumerate()
        .skip(from)
        .find_map(|(index, line)| line.find(text).map(|at| (index + 1, at + 1)))
        .unwrap_or_else(|| panic!("{script} has no {text:?} after {anchor:?}"));
    format!("{script}:{line}:{column}")
}

/// The source frame miette draws under an error raised at the one line of `script` holding
/// `line_text`, underlining the first `span` in it with `label`, and the lines around it.
#[track_caller]
pub fn script_frame(script: &str, line_text: &str, span: &str, label: &str) -> String {
    source_frame(&read_script(script), script, line_text, span, label)
}

/// Like `script_frame`, over `source` (a test's edited copy of `script`).
#[track_caller]
pub fn source_frame(
    source: &str,
    script: &str,
    line_text: &str,
    span: &str,
    label: &str,
) -> String {
    let (line, _) = place_in(source, script, line_text);
    frame_at(source, script, line, span, label)
}

/// Like `source_frame`, for a `line_text` that only the step named `step` holds once.
#[track_caller]
pub fn step_frame(
    source: &str,
    script: &str,
    step: &str,
    line_text: &str,
    span: &str,
    label: &str,
) -> String {
    let (range, _) = step_place(source, step);
    let above = source[..range.start].matches('\n').count();
    let (line, _) = place_in(&source[range], script, line_text);
    frame_at(source, script, above + line, span, label)
}

/// The frame under `line` (1-based) of `source`, underlining the first `span` in it.
#[track_caller]
fn frame_at(source: &str, script: &str, line: usize, span: &str, label: &str) -> String {
    let lines: Vec<&str> = source.lines().collect();
    let text = lines[line - 1];
    let column = text
        .find(span)
        .unwrap_or_else(|| panic!("{script}:{line} has no {span:?}"))
        + 1;
    let width = (line + 1).to_string().len();
    let pad = " ".repeat(width + 2);
    let numbered = |n: usize| format!(" {n:>width$} │ {}\n", lines[n - 1]).replace(" │ \n", " │\n");
    let length = span.chars().count();
    let left = length / 2;
    let marks = format!("{}┬{}", "─".repeat(left), "─".repeat(length - left - 1));
    let indent = " ".repeat(column - 1);
    format!(
        "{pad}╭─[{script}:{line}:{column}]\n{}{}{pad}· {indent}{marks}\n{pad}· {indent}{}╰── {label}\n{}{pad}╰────\n",
        numbered(line - 1),
        numbered(line),
        " ".repeat(left),
        numbered(line + 1),
    )
}

/// Where the step named `name` is in a script's `source`: from `step("name"` to the end of its
/// closure's line (`});` at the top level, `}),` inside a group of steps run together), and
/// whether it is inside a group.
#[track_caller]
pub fn step_place(source: &str, name: &str) -> (std::ops::Range<usize>, bool) {
    let start = source
        .find(&format!("step(\"{name}\""))
        .unwrap_or_else(|| panic!("no step {name}"));
    let end_of = |ending: &str| {
        source[start..]
            .find(ending)
            .map(|at| start + at + ending.len())
    };
    match (end_of("\n});\n"), end_of("\n}),\n")) {
        (Some(top), Some(grouped)) if grouped < top => (start..grouped, true),
        (Some(top), _) => (start..top, false),
        (None, Some(grouped)) => (start..grouped, true),
        (None, None) => panic!("no end of step {name}"),
    }
}

/// The step named `name` as a top-level statement, and `source` without it (a step taken out of
/// a group leaves the group's other steps in it).
#[track_caller]
fn cut_step(source: &str, name: &str) -> (String, String) {
    let (span, grouped) = step_place(source, name);
    let mut block = source[span.clone()].to_string();
    if grouped {
        block.truncate(block.len() - "}),\n".len());
        block.push_str("});\n");
    }
    // The blank line that separated it from the next step goes with it.
    let end = if source[span.end..].starts_with('\n') {
        span.end + 1
    } else {
        span.end
    };
    (
        block,
        format!("{}{}", &source[..span.start], &source[end..]),
    )
}

/// Where a statement put "before the step named `name`" goes: before the step itself, or, when
/// it is in a group, before the group (and the comment above it), as an operator would move it.
#[track_caller]
fn place_before(source: &str, name: &str) -> usize {
    let (span, grouped) = step_place(source, name);
    if !grouped {
        return span.start;
    }
    let group = source[..span.start]
        .rfind("\nconcurrently([\n")
        .map(|at| at + 1)
        .unwrap_or_else(|| panic!("step {name} ends with `}}),` outside a group"));
    // Back over the comment lines just above the group.
    let mut start = group;
    while let Some(line_start) = source[..start.saturating_sub(1)]
        .rfind('\n')
        .map(|at| at + 1)
    {
        if !source[line_start..start].starts_with("//") {
            break;
        }
        start = line_start;
    }
    start
}

/// `source` without the step named `name` (and without it in other steps' `needs`).
#[track_caller]
pub fn without_step(source: &str, name: &str) -> String {
    let (_, cut) = cut_step(source, name);
    cut.replace(&format!(", \"{name}\""), "")
        .replace(&format!("\"{name}\", "), "")
}

/// A moved step: the script with the step named `moved` cut out (of its group, if it is in one)
/// and put back as a step of its own just before the step named `before` (or its group).
#[track_caller]
pub fn move_step_before(source: &str, moved: &str, before: &str) -> String {
    let (block, without) = cut_step(source, moved);
    let at = place_before(&without, before);
    format!("{}{block}\n{}", &without[..at], &without[at..])
}

/// `source` with the step named `name` moved to right after the Pre-flight step.
#[track_caller]
pub fn moved_first(source: &str, name: &str) -> String {
    let (block, without) = cut_step(source, name);
    let after = step_place(&without, "Pre-flight").0.end;
    format!("{}\n{block}{}", &without[..after], &without[after..])
}
