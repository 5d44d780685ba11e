//! The userland sandbox the simulators run real scripts in, one for pods and CI jobs alike
//! ([`pod_command`]): a static busybox (the images' own userland; the machine's `sh` and
//! utilities when there is none) in private user, mount and UTS namespaces and the pod's own
//! network namespace ([`crate::netns`]: the cluster's DNS and Services, nothing of the host's),
//! chrooted into an empty root holding those programs and the pod's volumes at their mount
//! paths. A CI job is a pod of the runner's: its working copy, scripts and tools are mounts,
//! its stages run in their own process group that a timeout or the simulator's end kills
//! whole ([`run_in_group`], [`stop_running_jobs`]).

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// Sets up the sandbox, then runs the container's command in it. Arguments: the root folder,
/// the working folder, a static busybox (empty: the machine's programs instead), the
/// kubelet's `/etc/resolv.conf` (empty: none, no network), then
/// `SOURCE TARGET MODE` triples (MODE `rw` or `ro`), `--`, and the command. Only arguments
/// carry what the pod says: nothing of it is parsed by this script.
const POD_SANDBOX: &str = r#"set -e
root=$1; workdir=$2; busybox=$3; resolv=$4; shift 4
mount -t tmpfs tmpfs "$root"
if [ -n "$busybox" ]; then
  # The image's own userland: busybox and its applets in /bin, nothing else.
  mkdir -p "$root/bin" "$root/sbin" "$root/usr/bin" "$root/usr/sbin"
  cp "$busybox" "$root/bin/busybox"
  for applet in $("$busybox" --list); do
    [ "$applet" = busybox ] || ln -s /bin/busybox "$root/bin/$applet"
  done
else
  for dir in usr bin sbin lib lib32 lib64 libx32; do
    if [ -L "/$dir" ]; then ln -s "$(readlink "/$dir")" "$root/$dir"
    elif [ -d "/$dir" ]; then mkdir -p "$root/$dir"; mount --rbind "/$dir" "$root/$dir"; mount -o remount,bind,ro "$root/$dir" 2>/dev/null || true
    fi
  done
fi
mkdir -p "$root/tmp" "$root/dev" "$root/etc" "$root/root"
# The pod's own name, as its hostname, and the kubelet's /etc/hosts for it.
hostname "$HOSTNAME" 2>/dev/null || true
echo "$HOSTNAME" > "$root/etc/hostname"
printf '127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n' > "$root/etc/hosts"
if [ -n "$resolv" ]; then printf '%s' "$resolv" > "$root/etc/resolv.conf"; fi
for device in null zero random urandom; do
  touch "$root/dev/$device"; mount --bind "/dev/$device" "$root/dev/$device"
done
while [ "$1" != "--" ]; do
  source=$1; target=$root$2; mode=$3; shift 3
  if [ -d "$source" ]; then mkdir -p "$target"; else mkdir -p "$(dirname "$target")"; touch "$target"; fi
  mount --bind "$source" "$target"
  if [ "$mode" = ro ]; then mount -o remount,bind,ro "$target" 2>/dev/null || true; fi
done
shift
cd "$root"
exec chroot "$root" /bin/sh -c 'cd "$0" && exec "$@"' "$workdir" "$@"
"#;

/// A bind mount into a pod's sandbox: a host folder or file at a path of the container.
pub struct Mount {
    pub source: PathBuf,
    pub target: String,
    pub read_only: bool,
}

/// The network a pod's sandbox joins: its own namespace wired to the cluster, and the
/// `/etc/resolv.conf` that names the cluster's resolver in it.
pub struct PodNetwork<'a> {
    pub network: &'a crate::netns::Network,
    pub resolv_conf: String,
}

/// The command that runs `argv` in a pod's sandbox rooted at `root` (an empty folder): as user
/// root of a private user namespace, with private mount and UTS namespaces and the pod's
/// network namespace (`network`; without one, an empty one of its own), chrooted
/// into `root` holding the static busybox's applets ([`crate::tools::busybox`]; the machine's
/// programs without one) and `mounts`,
/// in `workdir`, for at most `limit` (`timeout` signals its whole process group, so nothing
/// the script started outlives it). The environment is only `PATH`, `HOSTNAME` and `HOME`:
/// the caller adds the container's.
pub fn pod_command(
    root: &Path,
    workdir: &str,
    mounts: &[Mount],
    argv: &[String],
    hostname: &str,
    limit: Duration,
    network: Option<&PodNetwork>,
) -> Command {
    let busybox = crate::tools::busybox();
    let mut command = Command::new("timeout");
    command
        .args(["-k", "2", &limit.as_secs().to_string()])
        .args(["unshare", "--map-root-user", "--mount", "--uts"]);
    match network {
        Some(network) => network.network.enter(&mut command),
        None => {
            command.arg("--net");
        }
    }
    command
        .arg("--")
        .args(["/bin/sh", "-c", POD_SANDBOX, "sandbox"])
        .arg(root)
        .arg(workdir)
        .arg(busybox.as_deref().unwrap_or(Path::new("")))
        .arg(
            network
                .map(|network| network.resolv_conf.as_str())
                .unwrap_or(""),
        );
    for mount in mounts {
        command
            .arg(&mount.source)
            .arg(&mount.target)
            .arg(if mount.read_only { "ro" } else { "rw" });
    }
    command
        .arg("--")
        .args(argv)
        .env_clear()
        .env(
            "PATH",
            "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
        )
        .env("HOSTNAME", hostname)
        .env("HOME", "/root");
    command
}

/// The job's private root: removed when dropped, whatever happened.
pub struct JobRoot(PathBuf);

impl JobRoot {
    /// A fresh root for job `id`, known to [`stop_running_jobs`] until dropped.
    pub fn new(id: u64) -> JobRoot {
        let root = std::env::temp_dir().join(format!("bprun-job-{id}-{}", fastrand::u64(..)));
        running().push(RunningJob {
            root: root.clone(),
            group: None,
        });
        JobRoot(root)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for JobRoot {
    fn drop(&mut self) {
        running().retain(|job| job.root != self.0);
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// How a script run in a process group ended: what it printed (stdout and stderr, interleaved,
/// at most the limit asked for), its exit code (`None` when killed), and whether its deadline
/// ended it.
pub struct GroupRun {
    pub output: Vec<u8>,
    pub code: Option<i32>,
    pub timed_out: bool,
}

/// Runs `command` (a [`pod_command`]) in its own process group, until it ends or `deadline`;
/// then kills whatever it left running. While it runs, the group is known to
/// [`stop_running_jobs`] under the job's `root` (a [`JobRoot`]'s path).
pub fn run_in_group(
    root: &Path,
    mut command: Command,
    deadline: Instant,
    output_limit: usize,
) -> Result<GroupRun, String> {
    let (mut reader, writer) =
        std::io::pipe().map_err(|error| format!("cannot start the job: {error}"))?;
    let writer_err = writer
        .try_clone()
        .map_err(|error| format!("cannot start the job: {error}"))?;
    use std::os::unix::process::CommandExt;
    command
        .stdin(Stdio::null())
        .stdout(writer)
        .stderr(writer_err)
        // Its own process group, so the timeout (and the end of the job) stops everything it
        // started, as removing the build container does.
        .process_group(0);
    let spawned = command.spawn();
    // The parent's copies of the pipe's write end must go, or the reader never sees its end.
    drop(command);
    let mut child = spawned.map_err(|error| format!("cannot start the job's shell: {error}"))?;
    set_running_group(root, Some(child.id()));
    let collector = std::thread::spawn(move || {
        let mut kept = Vec::new();
        let mut chunk = [0u8; 8192];
        loop {
            match reader.read(&mut chunk) {
                Ok(0) | Err(_) => break,
                // Beyond the limit the output is drained, not kept, so the job never blocks.
                Ok(read) if kept.len() < output_limit => kept.extend_from_slice(&chunk[..read]),
                Ok(_) => {}
            }
        }
        kept
    });
    let (code, timed_out) = loop {
        match child.try_wait() {
            Ok(Some(status)) => break (status.code(), false),
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Ok(None) => break (None, true),
            Err(_) => break (None, false),
        }
    };
    // Whatever the script left running goes with it.
    kill_group(child.id());
    // Forgotten before it is reaped: until then its id cannot name another process.
    set_running_group(root, None);
    let _ = child.wait();
    let output = collector.join().unwrap_or_default();
    Ok(GroupRun {
        output,
        code,
        timed_out,
    })
}

/// A job running now: its private root and, while a script stage runs, its process group.
struct RunningJob {
    root: PathBuf,
    group: Option<u32>,
}

/// The jobs running now, so a simulator that stops stops them too ([`stop_running_jobs`])
/// instead of leaving a `helm --wait` or a half-made folder behind.
static RUNNING: std::sync::Mutex<Vec<RunningJob>> = std::sync::Mutex::new(Vec::new());

fn running() -> std::sync::MutexGuard<'static, Vec<RunningJob>> {
    RUNNING.lock().unwrap_or_else(|p| p.into_inner())
}

/// Kills every running job's process group and removes its folder: the simulator is stopping
/// (as stopping a runner ends its builds).
pub fn stop_running_jobs() {
    for job in running().drain(..) {
        if let Some(group) = job.group {
            kill_group(group);
        }
        let _ = std::fs::remove_dir_all(job.root);
    }
}

/// Records the process group of the stage running in `root` (`None` once it ended).
fn set_running_group(root: &Path, group: Option<u32>) {
    if let Some(job) = running().iter_mut().find(|job| job.root == root) {
        job.group = group;
    }
}

/// SIGKILL to a process group, by its id (a system call, not a `kill` process per stage).
fn kill_group(group: u32) {
    // SAFETY: killpg takes plain integers and touches no memory of this process.
    let _ = unsafe { libc::killpg(group as libc::pid_t, libc::SIGKILL) };
}
