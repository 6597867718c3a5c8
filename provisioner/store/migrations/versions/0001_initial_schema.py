"""initial schema

Revision ID: 0001
Revises: (none)
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "api_tokens",
        sa.Column("token_id", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("role", sa.String(length=16), nullable=False),
        sa.Column("salt", sa.String(length=64), nullable=False),
        sa.Column("secret_hash", sa.String(length=128), nullable=False),
        sa.Column("created_ts", sa.Float(), nullable=False),
        sa.Column("revoked_ts", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("token_id", name=op.f("pk_api_tokens")),
    )
    op.create_table(
        "budgets",
        sa.Column("scope", sa.String(length=16), nullable=False),
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("monthly_usd", sa.String(length=64), nullable=True),
        sa.Column("usd_per_hour", sa.String(length=64), nullable=True),
        sa.Column("updated_ts", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("scope", "name", name=op.f("pk_budgets")),
    )
    op.create_table(
        "decisions",
        sa.Column("decision_id", sa.String(length=64), nullable=False),
        sa.Column("created_ts", sa.Float(), nullable=False),
        sa.Column("reason", sa.String(length=64), nullable=False),
        sa.Column("team", sa.String(length=64), nullable=False),
        sa.Column("job_ids", sa.JSON(), nullable=False),
        sa.Column("chosen", sa.String(length=256), nullable=False),
        sa.Column("alternatives", sa.JSON(), nullable=False),
        sa.Column("predicted_wait_s", sa.Float(), nullable=True),
        sa.Column("wait_budget_s", sa.Float(), nullable=True),
        sa.Column("wait_saved_s", sa.Float(), nullable=True),
        sa.Column("global_headroom_usd_hr", sa.String(length=64), nullable=True),
        sa.Column("team_headroom_usd", sa.String(length=64), nullable=True),
        sa.Column("detail", sa.JSON(), nullable=False),
        sa.Column("iac_review", sa.Text(), nullable=True),
        sa.Column("iac_review_format", sa.String(length=16), nullable=False),
        sa.PrimaryKeyConstraint("decision_id", name=op.f("pk_decisions")),
    )
    with op.batch_alter_table("decisions", schema=None) as batch_op:
        batch_op.create_index(
            "ix_decisions_created_ts_reason", ["created_ts", "reason"], unique=False
        )
        batch_op.create_index(batch_op.f("ix_decisions_reason"), ["reason"], unique=False)

    op.create_table(
        "gpu_telemetry",
        sa.Column("node", sa.String(length=128), nullable=False),
        sa.Column("gpu_index", sa.Integer(), nullable=False),
        sa.Column("uuid", sa.String(length=128), nullable=False),
        sa.Column("util_pct", sa.Float(), nullable=False),
        sa.Column("mem_used_mib", sa.Float(), nullable=False),
        sa.Column("mem_total_mib", sa.Float(), nullable=False),
        sa.Column("power_w", sa.Float(), nullable=True),
        sa.Column("energy_mj", sa.Float(), nullable=True),
        sa.Column("temperature_c", sa.Float(), nullable=True),
        sa.Column("sampled_ts", sa.Float(), nullable=False),
        sa.Column("received_ts", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("node", "gpu_index", name=op.f("pk_gpu_telemetry")),
    )
    op.create_table(
        "instances",
        sa.Column("instance_id", sa.String(length=128), nullable=False),
        sa.Column("pool", sa.String(length=64), nullable=False),
        sa.Column("cloud", sa.String(length=16), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("instance_type", sa.String(length=64), nullable=False),
        sa.Column("capacity", sa.String(length=16), nullable=False),
        sa.Column("gpu_model", sa.String(length=64), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("price_usd_hr", sa.String(length=64), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("launched_ts", sa.Float(), nullable=False),
        sa.Column("entered_state_ts", sa.Float(), nullable=False),
        sa.Column("ended_ts", sa.Float(), nullable=True),
        sa.Column("decision_id", sa.String(length=64), nullable=False),
        sa.Column("node_name", sa.String(length=128), nullable=False),
        sa.Column("team", sa.String(length=64), nullable=False),
        sa.Column("intent_token", sa.String(length=128), nullable=False),
        sa.Column("billed_until_ts", sa.Float(), nullable=True),
        sa.Column("billed_seconds", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("instance_id", name=op.f("pk_instances")),
    )
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_instances_node_name"), ["node_name"], unique=False)
        batch_op.create_index(batch_op.f("ix_instances_pool"), ["pool"], unique=False)
        batch_op.create_index(batch_op.f("ix_instances_state"), ["state"], unique=False)

    op.create_table(
        "intents",
        sa.Column("token", sa.String(length=128), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("status", sa.String(length=16), nullable=False),
        sa.Column("pool", sa.String(length=64), nullable=False),
        sa.Column("offer", sa.String(length=256), nullable=False),
        sa.Column("nodes", sa.Integer(), nullable=False),
        sa.Column("instance_id", sa.String(length=128), nullable=False),
        sa.Column("decision_id", sa.String(length=64), nullable=False),
        sa.Column("team", sa.String(length=64), nullable=False),
        sa.Column("price_usd_hr", sa.String(length=64), nullable=True),
        sa.Column("payload", sa.JSON(), nullable=False),
        sa.Column("created_ts", sa.Float(), nullable=False),
        sa.Column("completed_ts", sa.Float(), nullable=True),
        sa.Column("error_code", sa.String(length=64), nullable=False),
        sa.Column("error", sa.Text(), nullable=False),
        sa.Column("result", sa.JSON(), nullable=False),
        sa.PrimaryKeyConstraint("token", name=op.f("pk_intents")),
    )
    with op.batch_alter_table("intents", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_intents_status"), ["status"], unique=False)

    op.create_table(
        "job_usage",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("node_name", sa.String(length=128), nullable=False),
        sa.Column("instance_id", sa.String(length=128), nullable=False),
        sa.Column("pool", sa.String(length=64), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("start_ts", sa.Float(), nullable=False),
        sa.Column("end_ts", sa.Float(), nullable=True),
        sa.Column("account", sa.String(length=128), nullable=False),
        sa.Column("team", sa.String(length=128), nullable=False),
        sa.Column("partition", sa.String(length=128), nullable=False),
        sa.Column("user", sa.String(length=128), nullable=False),
        sa.Column("billed_until_ts", sa.Float(), nullable=True),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_job_usage")),
        sa.UniqueConstraint(
            "job_id", "node_name", "start_ts", name=op.f("uq_job_usage_job_id_node_name_start_ts")
        ),
    )
    with op.batch_alter_table("job_usage", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_job_usage_instance_id"), ["instance_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_job_usage_job_id"), ["job_id"], unique=False)
        batch_op.create_index(
            "ix_job_usage_node_name_start_ts", ["node_name", "start_ts"], unique=False
        )

    op.create_table(
        "ledger",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer(), "sqlite"), nullable=False),
        sa.Column("start_ts", sa.Float(), nullable=False),
        sa.Column("end_ts", sa.Float(), nullable=False),
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("cloud", sa.String(length=16), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("pool", sa.String(length=64), nullable=False),
        sa.Column("instance_id", sa.String(length=128), nullable=False),
        sa.Column("node_name", sa.String(length=128), nullable=False),
        sa.Column("offer", sa.String(length=256), nullable=False),
        sa.Column("instance_type", sa.String(length=64), nullable=False),
        sa.Column("capacity", sa.String(length=16), nullable=False),
        sa.Column("job_id", sa.String(length=128), nullable=False),
        sa.Column("team", sa.String(length=128), nullable=False),
        sa.Column("account", sa.String(length=128), nullable=False),
        sa.Column("user", sa.String(length=128), nullable=False),
        sa.Column("partition", sa.String(length=128), nullable=False),
        sa.Column("decision_id", sa.String(length=64), nullable=False),
        sa.Column("gpus", sa.Integer(), nullable=False),
        sa.Column("quantity", sa.Float(), nullable=False),
        sa.Column("unit", sa.String(length=16), nullable=False),
        sa.Column("unit_price_micros", sa.BigInteger(), nullable=False),
        sa.Column("cost_micros", sa.BigInteger(), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_ledger")),
    )
    with op.batch_alter_table("ledger", schema=None) as batch_op:
        batch_op.create_index(batch_op.f("ix_ledger_instance_id"), ["instance_id"], unique=False)
        batch_op.create_index(batch_op.f("ix_ledger_job_id"), ["job_id"], unique=False)
        batch_op.create_index(
            "ix_ledger_window",
            [
                "start_ts",
                "day",
                "kind",
                "team",
                "account",
                "user",
                "partition",
                "cloud",
                "region",
                "pool",
                "cost_micros",
            ],
            unique=False,
        )

    op.create_table(
        "ledger_rollup",
        sa.Column("grain", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("day", sa.String(length=10), nullable=False),
        sa.Column("kind", sa.String(length=16), nullable=False),
        sa.Column("team", sa.String(length=128), nullable=False),
        sa.Column("account", sa.String(length=128), nullable=False),
        sa.Column("user", sa.String(length=128), nullable=False),
        sa.Column("partition", sa.String(length=128), nullable=False),
        sa.Column("cloud", sa.String(length=16), nullable=False),
        sa.Column("region", sa.String(length=64), nullable=False),
        sa.Column("pool", sa.String(length=64), nullable=False),
        sa.Column("cost_micros", sa.BigInteger(), nullable=False),
        sa.Column("rows", sa.Integer(), nullable=False),
        sa.PrimaryKeyConstraint(
            "grain",
            "day",
            "kind",
            "team",
            "account",
            "user",
            "partition",
            "cloud",
            "region",
            "pool",
            name=op.f("pk_ledger_rollup"),
        ),
        sqlite_with_rowid=False,
    )
    op.create_table(
        "operator_state",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("paused", sa.Boolean(), nullable=False),
        sa.Column("reason", sa.String(length=500), nullable=False),
        sa.Column("updated_ts", sa.Float(), nullable=False),
        sa.Column("updated_by", sa.String(length=128), nullable=False),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_operator_state")),
    )
    op.create_table(
        "pools",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("cloud", sa.String(length=16), nullable=False),
        sa.Column("regions", sa.JSON(), nullable=False),
        sa.Column("partition", sa.String(length=64), nullable=False),
        sa.Column("team", sa.String(length=64), nullable=False),
        sa.Column("gpu_model", sa.String(length=64), nullable=False),
        sa.Column("capacity", sa.String(length=16), nullable=False),
        sa.Column("max_nodes", sa.Integer(), nullable=False),
        sa.Column("drained", sa.Boolean(), nullable=False),
        sa.Column("drained_ts", sa.Float(), nullable=True),
        sa.Column("drained_by", sa.String(length=128), nullable=False),
        sa.Column("updated_ts", sa.Float(), nullable=False),
        sa.PrimaryKeyConstraint("name", name=op.f("pk_pools")),
    )
    op.create_table(
        "instance_transitions",
        sa.Column("id", sa.Integer(), autoincrement=True, nullable=False),
        sa.Column("instance_id", sa.String(length=128), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("from_state", sa.String(length=16), nullable=True),
        sa.Column("to_state", sa.String(length=16), nullable=False),
        sa.Column("at_ts", sa.Float(), nullable=False),
        sa.Column("reason", sa.Text(), nullable=False),
        sa.ForeignKeyConstraint(
            ["instance_id"],
            ["instances.instance_id"],
            name=op.f("fk_instance_transitions_instance_id_instances"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_instance_transitions")),
        sa.UniqueConstraint(
            "instance_id", "seq", name=op.f("uq_instance_transitions_instance_id_seq")
        ),
    )
    with op.batch_alter_table("instance_transitions", schema=None) as batch_op:
        batch_op.create_index(
            batch_op.f("ix_instance_transitions_instance_id"), ["instance_id"], unique=False
        )


def downgrade() -> None:
    with op.batch_alter_table("instance_transitions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_instance_transitions_instance_id"))

    op.drop_table("instance_transitions")
    op.drop_table("pools")
    op.drop_table("operator_state")
    op.drop_table("ledger_rollup")
    with op.batch_alter_table("ledger", schema=None) as batch_op:
        batch_op.drop_index("ix_ledger_window")
        batch_op.drop_index(batch_op.f("ix_ledger_job_id"))
        batch_op.drop_index(batch_op.f("ix_ledger_instance_id"))

    op.drop_table("ledger")
    with op.batch_alter_table("job_usage", schema=None) as batch_op:
        batch_op.drop_index("ix_job_usage_node_name_start_ts")
        batch_op.drop_index(batch_op.f("ix_job_usage_job_id"))
        batch_op.drop_index(batch_op.f("ix_job_usage_instance_id"))

    op.drop_table("job_usage")
    with op.batch_alter_table("intents", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_intents_status"))

    op.drop_table("intents")
    with op.batch_alter_table("instances", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_instances_state"))
        batch_op.drop_index(batch_op.f("ix_instances_pool"))
        batch_op.drop_index(batch_op.f("ix_instances_node_name"))

    op.drop_table("instances")
    op.drop_table("gpu_telemetry")
    with op.batch_alter_table("decisions", schema=None) as batch_op:
        batch_op.drop_index(batch_op.f("ix_decisions_reason"))
        batch_op.drop_index("ix_decisions_created_ts_reason")

    op.drop_table("decisions")
    op.drop_table("budgets")
    op.drop_table("api_tokens")
