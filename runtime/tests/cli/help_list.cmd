// RUN: list --help
