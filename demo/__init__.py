"""The refund desk: a demo agent over a small orders and payments service."""
