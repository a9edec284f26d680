// xterm.js and its styles, loaded only when a terminal is opened (it is
// most of the console's weight).

import { FitAddon } from '@xterm/addon-fit';
import { Terminal } from '@xterm/xterm';
import '@xterm/xterm/css/xterm.css';

export { FitAddon, Terminal };
