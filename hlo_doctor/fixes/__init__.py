"""hlo_doctor.fixes package."""
