//! The listening sockets of `--web.listen-address`. `:port` (the default)
//! and `[::]:port` take IPv6 and IPv4 connections on one socket with
//! `IPV6_V6ONLY` off, whatever the system's default (`net.ipv6.bindv6only`)
//! is, as Go does for exporter-toolkit's `:port`; `:port` falls back to
//! IPv4 alone on a machine without IPv6.

use std::io;
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use socket2::{Domain, Protocol, Socket, Type};
use tokio::net::TcpListener;

use crate::flags::listen_address::ListenAddress;

/// Pending connections the kernel queues, as std's and tokio's `bind` ask.
const BACKLOG: i32 = 1024;

/// Listens on `address`; called inside a tokio runtime.
pub fn bind(address: ListenAddress) -> io::Result<TcpListener> {
    let socket = match address {
        ListenAddress::AnyAddress(port) => any_address(port, ipv6_socket)?,
        ListenAddress::Socket(addr) if addr.ip() == Ipv6Addr::UNSPECIFIED => {
            dual_stack(ipv6_socket()?, addr.port())?
        }
        ListenAddress::Socket(addr) => {
            let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
            listen(socket, addr)?
        }
    };
    socket.set_nonblocking(true)?;
    TcpListener::from_std(socket.into())
}

fn ipv6_socket() -> io::Result<Socket> {
    Socket::new(Domain::IPV6, Type::STREAM, Some(Protocol::TCP))
}

/// Every address: IPv6 and IPv4 on one socket; IPv4 alone when no IPv6
/// socket can be made (a kernel without IPv6, or `RestrictAddressFamilies`
/// without `AF_INET6`) or `[::]` cannot be bound. A port in use is an error
/// either way, never a reason to fall back.
fn any_address(port: u16, ipv6: impl FnOnce() -> io::Result<Socket>) -> io::Result<Socket> {
    let failure = match ipv6() {
        Ok(socket) => match dual_stack(socket, port) {
            Err(e) if e.kind() == io::ErrorKind::AddrNotAvailable => e,
            bound => return bound,
        },
        Err(e) => e,
    };
    tracing::warn!(
        port,
        error = %failure,
        "no IPv6 on this machine: listening on IPv4 only (0.0.0.0)"
    );
    let addr = SocketAddr::from((Ipv4Addr::UNSPECIFIED, port));
    listen(
        Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))?,
        addr,
    )
}

fn dual_stack(socket: Socket, port: u16) -> io::Result<Socket> {
    socket.set_only_v6(false)?;
    listen(socket, SocketAddr::from((Ipv6Addr::UNSPECIFIED, port)))
}

fn listen(socket: Socket, addr: SocketAddr) -> io::Result<Socket> {
    // As tokio's `bind` does: a restarted exporter listens again at once,
    // while the last one's connections are still in TIME_WAIT.
    #[cfg(unix)]
    socket.set_reuse_address(true)?;
    socket.bind(&addr.into())?;
    socket.listen(BACKLOG)?;
    Ok(socket)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Whether a TCP connection to `ip` on `port` is accepted.
    fn connects(ip: &str, port: u16) -> bool {
        let addr = SocketAddr::new(ip.parse().unwrap(), port);
        std::net::TcpStream::connect_timeout(&addr, std::time::Duration::from_secs(5)).is_ok()
    }

    #[tokio::test]
    async fn every_address_takes_ipv6_and_ipv4_on_one_socket() {
        for address in [ListenAddress::AnyAddress(0), "[::]:0".parse().unwrap()] {
            let listener = bind(address).unwrap();
            let local = listener.local_addr().unwrap();
            assert_eq!(local.ip(), Ipv6Addr::UNSPECIFIED, "{address}");
            let socket = socket2::SockRef::from(&listener);
            assert!(!socket.only_v6().unwrap(), "{address}: IPV6_V6ONLY is off");
            assert!(connects("::1", local.port()), "{address} over ::1");
            assert!(
                connects("127.0.0.1", local.port()),
                "{address} over 127.0.0.1"
            );
        }
        // An address as given: IPv4 only.
        let listener = bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = listener.local_addr().unwrap().port();
        assert!(connects("127.0.0.1", port));
        assert!(!connects("::1", port));
    }

    #[tokio::test]
    async fn without_ipv6_every_address_is_every_ipv4_address() {
        const EAFNOSUPPORT: i32 = 97;
        let no_ipv6 = || Err(io::Error::from_raw_os_error(EAFNOSUPPORT));
        let socket = any_address(0, no_ipv6).unwrap();
        let local = socket.local_addr().unwrap().as_socket().unwrap();
        assert_eq!(local.ip(), Ipv4Addr::UNSPECIFIED);
        assert!(connects("127.0.0.1", local.port()));
        // A port in use is not a missing IPv6: no fallback.
        let taken = std::net::TcpListener::bind("[::]:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let e = any_address(port, ipv6_socket).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
    }
}
