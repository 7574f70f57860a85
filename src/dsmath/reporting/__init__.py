"""The paper-style report and the README results section generated from it."""
