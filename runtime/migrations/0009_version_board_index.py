"""The version board's index: the version-blocked runs by (agent, version), oldest first.

Partial (only runs blocked by their version) and holding every column the board's counts and
its windowed query of each group's first runs read, so that both are read off the index.
"""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0008_status_counts"),
    ]

    operations = [
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(
                    (
                        "attention_reason__in",
                        (
                            "version_missing",
                            "version_unregistered",
                            "fingerprint_mismatch",
                            "input_mismatch",
                        ),
                    ),
                    ("status", "needs_attention"),
                ),
                fields=["agent", "version", "created_at", "attention_reason", "fingerprint", "id"],
                name="run_version_blocked",
            ),
        ),
    ]
