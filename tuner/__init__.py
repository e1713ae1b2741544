"""Everything that touches TVM schedules: measurement, the MetaSchedule backend, program analysis
and the reuse-based tuner. Never imports ``eto`` or ``selector``."""
