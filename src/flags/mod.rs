//! Parsers of flag values that every flag group shares (durations, sizes,
//! names, files) and the parsing of one flag group on its own. A leaf: the
//! modules that define flags import it, it imports none of them.

pub(crate) mod args;
pub(crate) mod byte_size;
pub(crate) mod duration;
pub(crate) mod listen_address;
pub(crate) mod values;
