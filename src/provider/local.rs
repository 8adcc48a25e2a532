//! The local provider: task instances as process groups on the orchestrating machine.
