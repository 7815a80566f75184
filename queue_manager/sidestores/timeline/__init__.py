"""The console chart's series and its marks: sampled in this process, the marks shared through PostgreSQL."""
