// RUN: repair --help
