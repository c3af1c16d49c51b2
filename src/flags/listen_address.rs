//! The values of `--web.listen-address`, read as exporter-toolkit (Go's
//! `net.Listen`) reads them: `:port` is every address of both IP families,
//! `host:port` the address given.

use std::fmt;
use std::net::SocketAddr;
use std::str::FromStr;

/// Where the exporter's HTTP server listens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListenAddress {
    /// `:port`: every IPv6 and IPv4 address on one socket, or every IPv4
    /// address where the machine has no IPv6.
    AnyAddress(u16),
    /// An IP address and port (`127.0.0.1:7778`, `[::1]:7778`); `[::]`
    /// takes IPv4 too, `0.0.0.0` only IPv4.
    Socket(SocketAddr),
}

impl FromStr for ListenAddress {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        if let Some(port) = text.strip_prefix(':') {
            return port.parse().map(ListenAddress::AnyAddress).map_err(|_| {
                format!("'{text}': the port after ':' must be a number from 0 to 65535")
            });
        }
        text.parse().map(ListenAddress::Socket).map_err(|_| {
            format!("'{text}' is not ':port' or an IP address with its port (127.0.0.1:7778, [::1]:7778)")
        })
    }
}

impl fmt::Display for ListenAddress {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ListenAddress::AnyAddress(port) => write!(f, ":{port}"),
            ListenAddress::Socket(addr) => write!(f, "{addr}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn port_alone_is_every_address_and_the_rest_is_as_written() {
        assert_eq!(":7778".parse(), Ok(ListenAddress::AnyAddress(7778)));
        assert_eq!(":0".parse(), Ok(ListenAddress::AnyAddress(0)));
        for text in ["127.0.0.1:7778", "[::1]:7778", "[::]:7778", "0.0.0.0:7778"] {
            let parsed: ListenAddress = text.parse().unwrap();
            assert_eq!(parsed, ListenAddress::Socket(text.parse().unwrap()));
            assert_eq!(parsed.to_string(), text);
        }
        assert_eq!(ListenAddress::AnyAddress(7778).to_string(), ":7778");
        for bad in [
            "localhost",
            "localhost:7778",
            ":",
            ":http",
            ":65536",
            "7778",
            "",
        ] {
            assert!(bad.parse::<ListenAddress>().is_err(), "{bad:?}");
        }
    }
}
