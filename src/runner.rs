//! The run loop: launch -> ready -> load each point -> archive -> stop; emits events to a reporter.
