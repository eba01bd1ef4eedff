"""hlo_doctor.report package."""
