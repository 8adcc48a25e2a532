//! SSH through ssh2: sessions, exec, upload, tunnels; blocking libssh2 calls kept off the async runtime.
