//! Host side of the plugin's imports: one file per WIT interface, each function a request built
//! from its arguments and handed to the one path its kind of call takes (a cache read, a write
//! through the authorizer, a local call), written against the ports of [`crate::api`].

mod authorize;
mod cache;
mod client;
mod config;
mod desired;
mod events;
mod function;
mod log;
