"""What every stage shares: exit codes and errors, the dataclasses passed between stages, formatters."""
