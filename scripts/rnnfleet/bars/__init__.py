"""Reading bar files: layouts and sniffing, which files make which dataset, files joined
into one dataset, the bars cache, shared-folder checks, data quality and inspection."""
