//! Parsers of flag values that every flag group shares (durations, sizes,
//! names, files) and the parsing of one flag group on its own. A leaf: the
//! modules that define flags import it, it imports none of them.

pub mod args;
pub mod byte_size;
pub mod duration;
pub mod listen_address;
pub mod values;
