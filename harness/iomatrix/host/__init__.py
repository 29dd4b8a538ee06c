"""The host side of a run, one folder a job: kernels/ (kernels fetched or built), vm/ (booting a
guest and running a run's boots), devices/ (the host's own block devices a matrix names); and what
spans them: preflight (every refusal before cells run) and environment (what a number depends on).
"""
