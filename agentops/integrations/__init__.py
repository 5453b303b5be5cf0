"""Integrations: signed webhooks, Slack and email notifications, Prometheus metrics, traces, cost.

Everything here reads the runtime's event log and tables and never writes them: webhooks and
notifications are consumers of the log (an outbox with a cursor per consumer), metrics are
computed from the database at scrape time, and cost from the operations' recorded usage.
"""
