//! The docker provider: task instances as containers on a Docker engine, through bollard.
