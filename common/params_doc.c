/*
 * params_doc.c — docs/params.md, generated from the parameter tables so the documentation cannot
 * drift from the code: tools/gen-params-doc writes it and a unit test fails when the committed
 * copy differs.
 */
#include "config.h"

#include <tdm/config.h>

void tdm_config_doc_markdown(FILE *out)
{
    fputs("# tandem parameters\n\n"
          "Generated from `include/tdm/config.h` by `tools/gen-params-doc` (`make params-doc`); do "
          "not edit.\n\n"
          "Precedence (docs/contracts.md §a): command line > environment `TDM_*` > override file "
          "(`--override-config FILE`, env `TDM_OVERRIDE_CONFIG`, written by reconfigure) > config "
          "file (`--config FILE`, env `TDM_CONFIG`) > default. `--print-config` prints every "
          "resolved value with its source (`cli`, `env`, `override`, `file`, `default`) as JSON; "
          "secrets print as `***`.\n\n"
          "Config files are INI: `key = value` with the INI key of the table (`-` and `_` are "
          "interchangeable), `#` or `;` comment lines, optional double quotes. Keys before any "
          "section and in the program's own section apply; other sections are skipped, so one "
          "file can configure both programs. An unknown key is an error.\n\n"
          "Booleans accept `true/false`, `1/0`, `yes/no`, `on/off`; on the command line a boolean "
          "flag alone means true (`--flag=false` clears it). Integer and number ranges are "
          "inclusive.\n\n",
          out);
    tdm_params_doc_markdown(&tdm_worker_config_table, out);
    tdm_params_doc_markdown(&tdm_tandemd_config_table, out);
}
