//! The hosts file: named hosts (address, user, key, jump host, GPUs) and clusters.
