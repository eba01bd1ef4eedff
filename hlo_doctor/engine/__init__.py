"""hlo_doctor.engine package."""
