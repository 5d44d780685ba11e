//! A pod's (or a CI job's) own network namespace, wired to the simulated cluster: what a process
//! inside can reach is what a kind pod could, and nothing else.
//!
//! Inside the namespace there is only loopback, up, holding `127.0.0.0/8` and the cluster DNS
//! address `10.96.0.10`. A cluster address `10.A.B.C` (a Service's ClusterIP, a pod's IP) stands
//! inside for its loopback image `127.A.B.C` ([`loopback_image`]): the cluster DNS resolver
//! answers names with those images, and a listener on `127.A.B.C:PORT` exists exactly while the
//! cluster address serves that port ([`Fabric::serving`]), so a connection to a Service without
//! ready endpoints is refused by the kernel, as kube-proxy's reject rule refuses it. An accepted
//! connection is relayed to the simulated program behind it ([`Fabric::backend`], a loopback
//! address of the host). The real cluster addresses lead nowhere (`network is unreachable`),
//! nor does the host's loopback (`connection refused`): no packet leaves the namespace but
//! through the relay.
//!
//! The resolver listens on `10.96.0.10:53` (UDP) while the cluster's DNS answers
//! ([`Fabric::dns_answers`]); otherwise the query meets a closed port, and Go says `read:
//! connection refused`, as with no CoreDNS endpoint. Messages are read and written with
//! hickory's DNS codec; what the answer is, is the cluster's ([`Fabric::lookup`]).
//!
//! Creating a network namespace needs `CAP_SYS_ADMIN` (the simulator runs as root here); the
//! listeners are created by short-lived threads that join the namespace, everything else runs
//! in the simulator's own.

use hickory_proto::op::{Header, Message, ResponseCode};
use hickory_proto::rr::rdata::A;
use hickory_proto::rr::{RData, Record, RecordType};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, Shutdown, SocketAddr, SocketAddrV4, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// The cluster DNS Service's address (kind's `kube-system/kube-dns`), on the namespace's loopback.
pub const CLUSTER_DNS_IP: Ipv4Addr = Ipv4Addr::new(10, 96, 0, 10);
/// How often the listeners follow the cluster (Services, endpoints, CoreDNS).
const SYNC_EVERY: Duration = Duration::from_millis(200);
/// How long the relay waits for the simulated program to accept.
const BACKEND_CONNECT: Duration = Duration::from_secs(5);
/// The TTL of the resolver's answers (CoreDNS's `kubernetes` plugin default is 5 s).
const ANSWER_TTL: u32 = 5;

/// What a namespace reaches: the simulated cluster, seen from one pod.
pub trait Fabric: Send + Sync {
    /// The cluster addresses and ports that accept a connection now (a Service's ClusterIP and
    /// port with a ready endpoint that serves it, a ready pod's IP and served port).
    fn serving(&self) -> BTreeSet<SocketAddrV4>;
    /// Where a connection to the cluster address `to` goes now: the simulated program's
    /// address on the host's loopback. `None`: the connection is reset.
    fn backend(&self, to: SocketAddrV4) -> Option<SocketAddr>;
    /// Whether the cluster's DNS answers queries now.
    fn dns_answers(&self) -> bool;
    /// The cluster's answer for a fully qualified name (`web.demo.svc.cluster.local.`):
    /// `None` when it cannot answer (no DNS server).
    fn lookup(&self, name: &str) -> Option<Lookup>;
}

/// The cluster's DNS answer for one name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lookup {
    /// The name exists: its cluster addresses (none for a headless Service without ready pods).
    Addresses(Vec<Ipv4Addr>),
    /// NXDOMAIN.
    NoSuchName,
}

/// The loopback address standing for a cluster address inside the namespace: `10.A.B.C` ->
/// `127.A.B.C`. Kind's cluster addresses are `10.96.0.0/12` (Services) and `10.244.0.0/16`
/// (pods), so no image is the namespace's own `127.0.0.1`.
pub fn loopback_image(cluster: Ipv4Addr) -> Option<Ipv4Addr> {
    let [first, second, third, fourth] = cluster.octets();
    (first == 10 && second != 0).then(|| Ipv4Addr::new(127, second, third, fourth))
}

/// The cluster address a loopback image stands for (the inverse of [`loopback_image`]).
pub fn cluster_address(image: Ipv4Addr) -> Option<Ipv4Addr> {
    let [first, second, third, fourth] = image.octets();
    (first == 127 && second != 0).then(|| Ipv4Addr::new(10, second, third, fourth))
}

/// The `/etc/resolv.conf` the kubelet writes for a pod of `namespace` (`dnsPolicy: ClusterFirst`).
pub fn resolv_conf(namespace: &str) -> String {
    format!(
        "search {namespace}.svc.cluster.local svc.cluster.local cluster.local\nnameserver {CLUSTER_DNS_IP}\noptions ndots:5\n"
    )
}

/// The DNS answer to the message `query` (`None`: not a DNS query): A records with the loopback
/// images of the cluster's addresses, NOERROR without records for other types of names that
/// exist, NXDOMAIN for names that do not, SERVFAIL while the cluster cannot answer.
pub fn answer(query: &[u8], fabric: &dyn Fabric) -> Option<Vec<u8>> {
    let request = Message::from_vec(query).ok()?;
    let mut response = Message::new();
    response.set_header(Header::response_from_request(request.header()));
    response.set_authoritative(true);
    response.set_recursion_available(true);
    for question in request.queries() {
        response.add_query(question.clone());
        let mut name = question.name().to_ascii().to_ascii_lowercase();
        if !name.ends_with('.') {
            name.push('.');
        }
        match fabric.lookup(&name) {
            None => {
                response.set_response_code(ResponseCode::ServFail);
            }
            Some(Lookup::NoSuchName) => {
                response.set_response_code(ResponseCode::NXDomain);
            }
            Some(Lookup::Addresses(addresses)) => {
                if question.query_type() == RecordType::A {
                    for address in addresses.into_iter().filter_map(loopback_image) {
                        response.add_answer(Record::from_rdata(
                            question.name().clone(),
                            ANSWER_TTL,
                            RData::A(A(address)),
                        ));
                    }
                }
            }
        }
    }
    response.to_vec().ok()
}

/// A network namespace of its own, wired to a [`Fabric`] until dropped.
pub struct Network {
    state: Arc<State>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct State {
    netns: OwnedFd,
    stop: AtomicBool,
    /// The connections being relayed (both ends), shut down when the network goes.
    relays: Mutex<HashMap<u64, [TcpStream; 2]>>,
    next_relay: AtomicU64,
}

impl Network {
    /// A fresh namespace wired to `fabric`; its listeners already match the cluster when this
    /// returns, so a process started right after finds them.
    pub fn new(fabric: Arc<dyn Fabric>) -> io::Result<Network> {
        let netns = in_thread(|| {
            // SAFETY: unshare takes a flag word; only this short-lived thread changes namespace.
            if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
                return Err(io::Error::last_os_error());
            }
            loopback_up()?;
            add_loopback_address(CLUSTER_DNS_IP)?;
            open_own_netns()
        })
        .map_err(|error| {
            io::Error::new(
                error.kind(),
                format!("cannot create the pod's network namespace: {error}"),
            )
        })?;
        let state = Arc::new(State {
            netns,
            stop: AtomicBool::new(false),
            relays: Mutex::default(),
            next_relay: AtomicU64::new(0),
        });
        let mut wiring = Wiring::default();
        wiring.sync(&state, fabric.as_ref());
        let thread = {
            let state = state.clone();
            std::thread::spawn(move || wiring.serve(&state, fabric.as_ref()))
        };
        Ok(Network {
            state,
            thread: Some(thread),
        })
    }

    /// The namespace's file descriptor, for `setns` in a child before it runs its program.
    pub fn fd(&self) -> RawFd {
        self.state.netns.as_raw_fd()
    }

    /// Makes `command`'s process join this namespace before it runs its program.
    pub fn enter(&self, command: &mut std::process::Command) {
        use std::os::unix::process::CommandExt;
        let fd = self.fd();
        // SAFETY: the closure only calls setns, which is async-signal-safe; the descriptor is
        // open in the child until it execs (the Network outlives the spawn).
        unsafe {
            command.pre_exec(move || {
                if libc::setns(fd, libc::CLONE_NEWNET) != 0 {
                    return Err(io::Error::last_os_error());
                }
                Ok(())
            });
        }
    }
}

impl Drop for Network {
    fn drop(&mut self) {
        self.state.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
        let relays = std::mem::take(
            &mut *self
                .state
                .relays
                .lock()
                .unwrap_or_else(|poison| poison.into_inner()),
        );
        for [inside, outside] in relays.into_values() {
            let _ = inside.shutdown(Shutdown::Both);
            let _ = outside.shutdown(Shutdown::Both);
        }
    }
}

/// The namespace's sockets: listeners by the cluster address they stand for, the resolver's.
#[derive(Default)]
struct Wiring {
    listeners: BTreeMap<SocketAddrV4, TcpListener>,
    resolver: Option<UdpSocket>,
    synced: Option<Instant>,
}

impl Wiring {
    /// Opens the listeners of the addresses that serve now and closes the others.
    fn sync(&mut self, state: &State, fabric: &dyn Fabric) {
        self.synced = Some(Instant::now());
        let wanted = fabric.serving();
        self.listeners.retain(|address, _| wanted.contains(address));
        let missing: Vec<SocketAddrV4> = wanted
            .into_iter()
            .filter(|address| !self.listeners.contains_key(address))
            .filter(|address| loopback_image(*address.ip()).is_some())
            .collect();
        let dns_wanted = fabric.dns_answers();
        if !dns_wanted {
            self.resolver = None;
        }
        let open_resolver = dns_wanted && self.resolver.is_none();
        if missing.is_empty() && !open_resolver {
            return;
        }
        let netns = state.netns.as_raw_fd();
        let opened = in_thread(move || {
            join_netns(netns)?;
            let listeners: Vec<(SocketAddrV4, TcpListener)> = missing
                .into_iter()
                .filter_map(|address| {
                    let image = loopback_image(*address.ip())?;
                    let listener = TcpListener::bind(SocketAddrV4::new(image, address.port()))
                        .and_then(|listener| listener.set_nonblocking(true).map(|()| listener))
                        .ok()?;
                    Some((address, listener))
                })
                .collect();
            let resolver = if open_resolver {
                UdpSocket::bind(SocketAddrV4::new(CLUSTER_DNS_IP, 53))
                    .and_then(|socket| socket.set_nonblocking(true).map(|()| socket))
                    .ok()
            } else {
                None
            };
            Ok((listeners, resolver))
        });
        if let Ok((listeners, resolver)) = opened {
            self.listeners.extend(listeners);
            if resolver.is_some() {
                self.resolver = resolver;
            }
        }
    }

    /// Accepts, relays and answers until the network is dropped.
    fn serve(mut self, state: &Arc<State>, fabric: &dyn Fabric) {
        while !state.stop.load(Ordering::SeqCst) {
            if self.synced.is_none_or(|at| at.elapsed() >= SYNC_EVERY) {
                self.sync(state, fabric);
            }
            let mut polled: Vec<libc::pollfd> = self
                .listeners
                .values()
                .map(|listener| listener.as_raw_fd())
                .chain(self.resolver.iter().map(|socket| socket.as_raw_fd()))
                .map(|fd| libc::pollfd {
                    fd,
                    events: libc::POLLIN,
                    revents: 0,
                })
                .collect();
            // SAFETY: `polled` is a valid array of pollfd for its length.
            let ready =
                unsafe { libc::poll(polled.as_mut_ptr(), polled.len() as libc::nfds_t, 50) };
            if ready <= 0 {
                continue;
            }
            let readable: BTreeSet<RawFd> = polled
                .iter()
                .filter(|entry| entry.revents != 0)
                .map(|entry| entry.fd)
                .collect();
            for (address, listener) in &self.listeners {
                if !readable.contains(&listener.as_raw_fd()) {
                    continue;
                }
                while let Ok((inside, _)) = listener.accept() {
                    relay(state, inside, fabric.backend(*address));
                }
            }
            if let Some(socket) = &self.resolver
                && readable.contains(&socket.as_raw_fd())
            {
                let mut buffer = [0u8; 4096];
                while let Ok((length, peer)) = socket.recv_from(&mut buffer) {
                    if let Some(reply) = answer(&buffer[..length], fabric) {
                        let _ = socket.send_to(&reply, peer);
                    }
                }
            }
        }
    }
}

/// Relays `inside` (a connection accepted in the namespace) to `backend`, in threads of the
/// simulator's own namespace; without a backend, or when it does not accept, resets it.
fn relay(state: &Arc<State>, inside: TcpStream, backend: Option<SocketAddr>) {
    let state = state.clone();
    std::thread::spawn(move || {
        let _ = inside.set_nonblocking(false);
        let outside =
            backend.and_then(|backend| TcpStream::connect_timeout(&backend, BACKEND_CONNECT).ok());
        let Some(outside) = outside else {
            reset(&inside);
            return;
        };
        let (Ok(inside_reader), Ok(outside_reader)) = (inside.try_clone(), outside.try_clone())
        else {
            return;
        };
        let id = state.next_relay.fetch_add(1, Ordering::SeqCst);
        if let (Ok(kept_inside), Ok(kept_outside)) = (inside.try_clone(), outside.try_clone()) {
            state
                .relays
                .lock()
                .unwrap_or_else(|poison| poison.into_inner())
                .insert(id, [kept_inside, kept_outside]);
        }
        let upstream = std::thread::spawn(move || copy_then_close(inside_reader, outside));
        copy_then_close(outside_reader, inside);
        let _ = upstream.join();
        state
            .relays
            .lock()
            .unwrap_or_else(|poison| poison.into_inner())
            .remove(&id);
    });
}

/// Copies `from` into `to` until `from` ends, then ends `to`'s sending side.
fn copy_then_close(mut from: TcpStream, mut to: TcpStream) {
    let _ = io::copy(&mut from, &mut to);
    let _ = to.shutdown(Shutdown::Write);
    let _ = from.shutdown(Shutdown::Read);
}

/// Closes a connection with a reset (linger 0), as a refused or dropped backend looks.
fn reset(stream: &TcpStream) {
    let linger = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    // SAFETY: setsockopt reads `linger` for its size only.
    unsafe {
        libc::setsockopt(
            stream.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_LINGER,
            (&linger as *const libc::linger).cast(),
            std::mem::size_of::<libc::linger>() as libc::socklen_t,
        );
    }
}

/// Runs `work` in a thread of its own (whose namespace changes end with it) and returns its result.
fn in_thread<T: Send + 'static>(
    work: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    std::thread::spawn(work)
        .join()
        .unwrap_or_else(|_| Err(io::Error::other("the namespace thread panicked")))
}

/// Makes the calling thread join the network namespace `fd`.
fn join_netns(fd: RawFd) -> io::Result<()> {
    // SAFETY: setns takes a descriptor and a flag word.
    if unsafe { libc::setns(fd, libc::CLONE_NEWNET) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// The calling thread's network namespace, as a descriptor that keeps it alive.
fn open_own_netns() -> io::Result<OwnedFd> {
    let file = std::fs::File::open("/proc/thread-self/ns/net")?;
    Ok(OwnedFd::from(file))
}

/// The loopback interface's index: the first device of every network namespace.
const LOOPBACK_INDEX: u32 = 1;

/// Brings the namespace's loopback up (`ip link set lo up`), by rtnetlink.
fn loopback_up() -> io::Result<()> {
    const RTM_NEWLINK: u16 = 16;
    const IFF_UP: u32 = 1;
    let mut body = Vec::with_capacity(16);
    body.push(libc::AF_UNSPEC as u8);
    body.push(0);
    body.extend_from_slice(&0u16.to_ne_bytes()); // device type
    body.extend_from_slice(&(LOOPBACK_INDEX as i32).to_ne_bytes());
    body.extend_from_slice(&IFF_UP.to_ne_bytes()); // flags
    body.extend_from_slice(&IFF_UP.to_ne_bytes()); // the flags that change
    rtnetlink(RTM_NEWLINK, 0, &body)
}

/// Adds `address/32` to the namespace's loopback (`ip addr add ADDRESS/32 dev lo`).
fn add_loopback_address(address: Ipv4Addr) -> io::Result<()> {
    const RTM_NEWADDR: u16 = 20;
    const IFA_ADDRESS: u16 = 1;
    const IFA_LOCAL: u16 = 2;
    const NLM_F_CREATE: u16 = 0x400;
    const NLM_F_EXCL: u16 = 0x200;
    let mut body = vec![libc::AF_INET as u8, 32, 0, 0];
    body.extend_from_slice(&LOOPBACK_INDEX.to_ne_bytes());
    for kind in [IFA_LOCAL, IFA_ADDRESS] {
        body.extend_from_slice(&8u16.to_ne_bytes());
        body.extend_from_slice(&kind.to_ne_bytes());
        body.extend_from_slice(&address.octets());
    }
    rtnetlink(RTM_NEWADDR, NLM_F_CREATE | NLM_F_EXCL, &body)
}

/// Sends one rtnetlink request and reads its acknowledgement.
fn rtnetlink(kind: u16, flags: u16, body: &[u8]) -> io::Result<()> {
    const NLM_F_REQUEST: u16 = 1;
    const NLM_F_ACK: u16 = 4;
    const NLMSG_ERROR: u16 = 2;
    // SAFETY: plain socket creation; the descriptor is owned right away.
    let raw = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if raw < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: `raw` is a fresh descriptor no one else owns.
    let mut socket = std::fs::File::from(unsafe { OwnedFd::from_raw_fd(raw) });
    let length = 16 + body.len();
    let mut message = Vec::with_capacity(length);
    message.extend_from_slice(&(length as u32).to_ne_bytes());
    message.extend_from_slice(&kind.to_ne_bytes());
    message.extend_from_slice(&(NLM_F_REQUEST | NLM_F_ACK | flags).to_ne_bytes());
    message.extend_from_slice(&1u32.to_ne_bytes()); // sequence
    message.extend_from_slice(&0u32.to_ne_bytes()); // port id: the kernel's
    message.extend_from_slice(body);
    // A netlink socket takes one message per write and gives one per read.
    socket.write_all(&message)?;
    let mut reply = [0u8; 1024];
    let read = socket.read(&mut reply)?;
    if read < 20 {
        return Err(io::Error::other("a short rtnetlink acknowledgement"));
    }
    let reply_kind = u16::from_ne_bytes([reply[4], reply[5]]);
    let code = i32::from_ne_bytes([reply[16], reply[17], reply[18], reply[19]]);
    if reply_kind == NLMSG_ERROR && code != 0 {
        return Err(io::Error::from_raw_os_error(-code));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use hickory_proto::op::Query;
    use hickory_proto::rr::Name;
    use std::str::FromStr;

    /// A cluster of one Service (`web.demo`, 10.96.3.4:80) served by `backend`.
    struct OneService {
        backend: SocketAddr,
        up: AtomicBool,
    }

    impl Fabric for OneService {
        fn serving(&self) -> BTreeSet<SocketAddrV4> {
            if self.up.load(Ordering::SeqCst) {
                BTreeSet::from([SocketAddrV4::new(Ipv4Addr::new(10, 96, 3, 4), 80)])
            } else {
                BTreeSet::new()
            }
        }
        fn backend(&self, _to: SocketAddrV4) -> Option<SocketAddr> {
            Some(self.backend)
        }
        fn dns_answers(&self) -> bool {
            true
        }
        fn lookup(&self, name: &str) -> Option<Lookup> {
            Some(if name == "web.demo.svc.cluster.local." {
                Lookup::Addresses(vec![Ipv4Addr::new(10, 96, 3, 4)])
            } else {
                Lookup::NoSuchName
            })
        }
    }

    fn query(name: &str, kind: RecordType) -> Vec<u8> {
        let mut message = Message::new();
        message.set_id(7);
        message.set_recursion_desired(true);
        message.add_query(Query::query(Name::from_str(name).unwrap(), kind));
        message.to_vec().unwrap()
    }

    fn fabric() -> OneService {
        OneService {
            backend: "127.0.0.1:9".parse().unwrap(),
            up: AtomicBool::new(true),
        }
    }

    #[test]
    fn cluster_addresses_stand_for_loopback_images_and_back() {
        let image = loopback_image(Ipv4Addr::new(10, 96, 3, 4)).unwrap();
        assert_eq!(image, Ipv4Addr::new(127, 96, 3, 4));
        assert_eq!(cluster_address(image), Some(Ipv4Addr::new(10, 96, 3, 4)));
        assert_eq!(loopback_image(Ipv4Addr::new(192, 168, 1, 1)), None);
        assert_eq!(cluster_address(Ipv4Addr::LOCALHOST), None);
    }

    #[test]
    fn a_service_name_answers_its_image_and_others_nxdomain() {
        let fabric = fabric();
        let reply = Message::from_vec(
            &answer(
                &query("web.demo.svc.cluster.local.", RecordType::A),
                &fabric,
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(reply.id(), 7);
        assert_eq!(reply.response_code(), ResponseCode::NoError);
        let addresses: Vec<String> = reply
            .answers()
            .iter()
            .map(|record| record.data().to_string())
            .collect();
        assert_eq!(addresses, ["127.96.3.4"]);
        let none = Message::from_vec(
            &answer(
                &query("web.demo.svc.cluster.local.", RecordType::AAAA),
                &fabric,
            )
            .unwrap(),
        )
        .unwrap();
        assert_eq!(
            (none.response_code(), none.answers().len()),
            (ResponseCode::NoError, 0)
        );
        let unknown =
            Message::from_vec(&answer(&query("example.com.", RecordType::A), &fabric).unwrap())
                .unwrap();
        assert_eq!(unknown.response_code(), ResponseCode::NXDomain);
        assert_eq!(answer(b"not dns", &fabric), None);
    }

    #[test]
    fn the_resolv_conf_is_the_kubelets() {
        assert_eq!(
            resolv_conf("demo"),
            "search demo.svc.cluster.local svc.cluster.local cluster.local\nnameserver 10.96.0.10\noptions ndots:5\n"
        );
    }

    /// Dials `to` from inside the network's namespace (a thread that joins it).
    fn dial_inside(network: &Network, to: SocketAddrV4) -> io::Result<String> {
        let fd = network.fd();
        in_thread(move || {
            join_netns(fd)?;
            let mut stream =
                TcpStream::connect_timeout(&SocketAddr::V4(to), Duration::from_secs(2))?;
            stream.set_read_timeout(Some(Duration::from_secs(5)))?;
            stream.write_all(b"ping")?;
            stream.shutdown(Shutdown::Write)?;
            let mut reply = String::new();
            stream.read_to_string(&mut reply)?;
            Ok(reply)
        })
    }

    #[test]
    fn inside_a_service_image_leads_to_its_program_and_nothing_else_is_reachable() {
        let backend = TcpListener::bind("127.0.0.1:0").unwrap();
        let backend_address = backend.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut stream, _) = backend.accept().unwrap();
            let mut asked = String::new();
            stream.read_to_string(&mut asked).unwrap();
            stream
                .write_all(format!("pong to {asked}").as_bytes())
                .unwrap();
        });
        let fabric = Arc::new(OneService {
            backend: backend_address,
            up: AtomicBool::new(true),
        });
        let network = Network::new(fabric.clone()).unwrap();
        let image = SocketAddrV4::new(Ipv4Addr::new(127, 96, 3, 4), 80);
        assert_eq!(dial_inside(&network, image).unwrap(), "pong to ping");
        server.join().unwrap();
        // The host's own loopback listener is not the namespace's.
        let host_port = match backend_address {
            SocketAddr::V4(address) => address,
            SocketAddr::V6(_) => unreachable!(),
        };
        let refused = dial_inside(&network, host_port).unwrap_err();
        assert_eq!(refused.kind(), io::ErrorKind::ConnectionRefused);
        // The real cluster address leads nowhere.
        let unreachable =
            dial_inside(&network, SocketAddrV4::new(Ipv4Addr::new(10, 96, 3, 4), 80)).unwrap_err();
        assert_eq!(unreachable.kind(), io::ErrorKind::NetworkUnreachable);
        // Once the Service no longer serves, its image refuses.
        fabric.up.store(false, Ordering::SeqCst);
        std::thread::sleep(SYNC_EVERY * 3);
        let closed = dial_inside(&network, image).unwrap_err();
        assert_eq!(closed.kind(), io::ErrorKind::ConnectionRefused);
    }

    #[test]
    fn the_resolver_answers_inside_on_the_cluster_dns_address() {
        let network = Network::new(Arc::new(fabric())).unwrap();
        let fd = network.fd();
        let reply = in_thread(move || {
            join_netns(fd)?;
            let socket = UdpSocket::bind("127.0.0.1:0")?;
            socket.set_read_timeout(Some(Duration::from_secs(5)))?;
            socket.send_to(
                &query("web.demo.svc.cluster.local.", RecordType::A),
                SocketAddrV4::new(CLUSTER_DNS_IP, 53),
            )?;
            let mut buffer = [0u8; 512];
            let (length, _) = socket.recv_from(&mut buffer)?;
            Ok(buffer[..length].to_vec())
        })
        .unwrap();
        let reply = Message::from_vec(&reply).unwrap();
        assert_eq!(reply.answers()[0].data().to_string(), "127.96.3.4");
    }
}
